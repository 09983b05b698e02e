package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/harness"
	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/inject/emit"
	"github.com/xpuinject/xpuinject/inject/outdir"
	"github.com/xpuinject/xpuinject/inject/pack"
	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// pipelineOptions are the flags of `xpuinject MODEL`.
type pipelineOptions struct {
	Model        string
	Out          string
	SkipEval     bool
	Push         bool
	RepoID       string
	PackedRepoID string
	Private      bool
	SourceRepo   string // --source-repo-id: the Hub model of a local MODEL folder, for the cards
	Force        bool
	MaxShardSize string
	Plan         planFlags
	JSON         bool
	Eval         evalOptions
	gpuAuto      bool // --gpu not given: the plan takes the data of the GPU the eval runs on
}

func newPipelineCmd(f *Factory) *cobra.Command { return newPipelineCmdWith(f, nil) }

func newPipelineCmdWith(f *Factory, runF func(context.Context, *pipelineOptions) error) *cobra.Command {
	o := &pipelineOptions{}
	cmd := &cobra.Command{
		Use:   "xpuinject MODEL",
		Short: "fetch, plan, pack, package, evaluate (and with --push publish) a model's kernel package",
		Long: `xpuinject takes a Hugging Face model, finds the layers optimized Triton kernels can
replace, folds and pre-packs their weights offline, writes a kernel-hub package that
injects itself into a transformers model as its plan says, and measures the injected model
against the original.

  xpuinject MODEL        fetch (when needed) -> plan -> pack -> package -> eval -> report
  xpuinject MODEL --push ... then publish the package (kernel repo --repo-id) and the packed
                         weights (model repo --packed-repo-id), only after a successful eval

MODEL is a local folder (config.json + safetensors), a preset or org/name[@revision].
Artifacts go under --out (default out/<kernel name>): packed/ (weights + plan.yaml), package/
(the kernel-hub repo), eval/ (eval.json, report.md, plots). Without --gpu, the plan takes the
vendor routes measured on the GPU the eval runs on, where a data file lists it.

` + presetNames() + `.`,
		Example: `  xpuinject testdata/fixtures/llama-tiny --device cpu        # offline, on a shipped fixture
  xpuinject llama --out out/llama                            # Llama-3.2-1B on the GPU
  xpuinject llama --push --repo-id my-org/llama-xpu-kernels  # and publish`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				if err := mistypedCommand(cmd.Root(), args[0]); err != nil {
					return err
				}
			}
			if err := cobra.MaximumNArgs(1)(cmd, args); err != nil {
				return &usageError{err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			o.Model = args[0]
			o.gpuAuto = !cmd.Flags().Changed("gpu")
			if o.Push && o.RepoID == "" {
				return &usageError{fmt.Errorf("--push needs --repo-id ORG/NAME")}
			}
			if o.PackedRepoID != "" && o.PackedRepoID == o.RepoID {
				return &usageError{fmt.Errorf("--packed-repo-id %s is the kernel repository; the packed weights need a repository of their own", o.PackedRepoID)}
			}
			_, local, ok := argLabel(o.Model)
			if o.SourceRepo != "" {
				if _, err := parseSourceRepo(o.SourceRepo); err != nil {
					return err
				}
				if !o.Push || (ok && local == "") {
					return &usageError{fmt.Errorf("--source-repo-id names the Hub model of a local MODEL folder " +
						"for the cards --push publishes; drop it here")}
				}
			}
			if o.Push && ok && local != "" && o.SourceRepo == "" {
				return &usageError{fmt.Errorf("--push: %s is a local folder\nHub users cannot load it: "+
					"pass --source-repo-id ORG/NAME[@REVISION], the Hub model the folder holds", o.Model)}
			}
			if o.Push && o.SkipEval {
				return &usageError{fmt.Errorf("--push publishes only after a successful eval; drop --skip-eval (or publish by hand with 'xpuinject push')")}
			}
			if err := checkEvalFlags(&o.Eval); err != nil {
				return err
			}
			if err := o.Plan.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return pipelineRun(cmd.Context(), f, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Out, "out", "", "output folder (default out/<kernel name>)")
	fl.BoolVar(&o.SkipEval, "skip-eval", false, "stop after writing the package")
	fl.BoolVar(&o.Push, "push", false, "publish the package to the Hub after a successful eval")
	fl.StringVar(&o.RepoID, "repo-id", "", "Hub kernel repository to publish the package to (with --push)")
	fl.StringVar(&o.PackedRepoID, "packed-repo-id", "", "Hub model repository for the packed weights (default: <repo-id>-packed)")
	fl.BoolVar(&o.Private, "private", false, "create the Hub repositories private (with --push)")
	fl.StringVar(&o.SourceRepo, "source-repo-id", "", "Hub model (ORG/NAME[@REVISION]) the published cards name when "+
		"MODEL is a local folder (with --push)")
	fl.BoolVar(&o.Force, "force", false, "replace an earlier run's outputs in --out (never other files)")
	fl.StringVar(&o.MaxShardSize, "max-shard-size", "5GB", "largest packed shard")
	fl.BoolVar(&o.JSON, "json", false, "print where every artifact went as one JSON object")
	addEvalFlags(cmd, &o.Eval)
	addPlanFlags(cmd, &o.Plan)
	return cmd
}

// evalGPU is the GPU data a pipeline plans with when --gpu is not given: the file that lists
// the device the eval runs on (device: --device), "" to keep the default, with a line saying
// which. On the CPU, or when Python was not found, nothing is said: the eval reports that.
func evalGPU(device string, p probed) (gpu, note string) {
	if p.err != nil || device == "cpu" || p.env.Device == "" || !(p.env.CUDA || p.env.XPU) {
		return "", ""
	}
	if gpu = kernels.GPUOfDevice(p.env.Device); gpu != "" {
		return gpu, fmt.Sprintf("gpu: %s, the eval's device: vendor routes of %s/%s.json (--gpu picks others)",
			p.env.Device, kernels.GPUDir, gpu)
	}
	return "", fmt.Sprintf("gpu: no measured data for %s (have: %s): the plan takes %s's vendor routes (--gpu picks others)",
		p.env.Device, strings.Join(kernels.GPUs(), ", "), kernels.DefaultGPU())
}

func pipelineRun(ctx context.Context, f *Factory, o *pipelineOptions) (err error) {
	start := time.Now()
	step := func(format string, a ...any) {
		fmt.Fprintf(f.ErrOut, "[%5.1fs] "+format+"\n", append([]any{time.Since(start).Seconds()}, a...)...)
	}
	maxShard, err := pack.ParseSize(o.MaxShardSize)
	if err != nil {
		return &usageError{err}
	}
	// Every output is checked before any work (a fetch, the plan), so that a refused --out
	// is a usage error found at once; checked again below with the checkpoint's files.
	var textInput []outdir.Input
	if o.Eval.Text != "" {
		textInput = []outdir.Input{{Path: o.Eval.Text, What: "the --text file"}}
	}
	if label, local, ok := argLabel(o.Model); ok {
		out := pipelineOut(o.Out, emit.KernelName(label))
		early := textInput
		if local != "" {
			early = append(modelInputs(local, nil), textInput...)
		}
		if err := checkPipelineOut(out, o.Force, early); err != nil {
			return err
		}
	}
	// Where the run's time goes, stage by stage, for the report (eval adds its own).
	var stages []harness.StageTime
	mark := start
	stage := func(name string) {
		stages = append(stages, harness.StageTime{Stage: name, S: harness.Num(time.Since(mark).Seconds())})
		mark = time.Now()
	}
	// Python starts up (imports torch to probe it) while Go fetches, plans and packs: seconds
	// off the critical path.
	var probe chan probed
	if !o.SkipEval {
		probe = make(chan probed, 1)
		go func() { probe <- findAndProbe(ctx, o.Eval.Python, f.Getenv) }()
	}
	if probe != nil && o.gpuAuto && o.Eval.Device != "cpu" {
		// The plan's vendor routes are measured per GPU: those of the GPU the eval runs on,
		// so the latency it reports is that of the routes that device wants. (An eval on the
		// CPU plans with the default and does not wait for the probe here.)
		p := <-probe
		probe = make(chan probed, 1)
		probe <- p
		gpu, note := evalGPU(o.Eval.Device, p)
		if gpu != "" {
			o.Plan.GPU = gpu
		}
		if note != "" {
			step("%s", note)
		}
	}
	step("resolve %s", o.Model)
	dir, g, pl, err := loadPlan(ctx, f, o.Model, o.Plan)
	if err != nil {
		return err
	}
	step("plan: %s, %s; dtype %s", pl.Arch, pl.Counts(), pl.DType)
	stage("checks, resolve and plan")

	name := emit.KernelName(modelLabel(o.Model, pl))
	out := pipelineOut(o.Out, name)
	packedDir, packageDir, evalDir := filepath.Join(out, "packed"), filepath.Join(out, "package"), filepath.Join(out, "eval")
	inputs := append(modelInputs(dir, g.Checkpoint), textInput...)
	if err := checkPipelineOut(out, o.Force, inputs); err != nil {
		return err
	}
	_, statErr := os.Lstat(out)
	if err := outdir.EnsureDir(out, outdir.Options{Kind: outdir.KindPipeline, Tool: tool(), Inputs: inputs}); err != nil {
		return err
	}
	if os.IsNotExist(statErr) {
		// A run that fails before writing any part leaves no run folder behind.
		defer func() {
			if err != nil {
				removeIfBare(out, inputs)
			}
		}()
	}
	step("pack -> %s", packedDir)
	prog := newPackProgress(f)
	pres, err := pack.Write(ctx, g.Checkpoint, pl, packedDir, pack.Options{MaxShardSize: maxShard, Tool: tool(),
		Progress: prog.report, NoReplace: !o.Force, Inputs: inputs})
	prog.done()
	if err != nil {
		return err
	}
	step("packed %s", packedLine(pres, pl))
	stage("pack")

	step("package -> %s", packageDir)
	emitted, err := emit.Write(ctx, pl, packageDir, emit.Options{
		Name: name, RepoID: o.RepoID, PackedRepoID: o.PackedRepoID, ModelClass: modelClass(g.Checkpoint),
		Model: modelLabel(o.Model, pl), Tool: tool(), Force: o.Force, Inputs: inputs,
	})
	if err != nil {
		return err
	}

	// An earlier run's eval/ measured the weights just replaced: it goes now (the check
	// above asked for --force when there is one), so that a skipped or failed eval never
	// leaves it beside weights it did not measure.
	if err := outdir.Remove(evalDir, outdir.Options{Kind: outdir.KindEval, Inputs: inputs}); err != nil {
		return err
	}
	stage("package")
	var report *harness.ReportFiles
	if !o.SkipEval {
		ev := o.Eval
		ev.Model, ev.PackageDir, ev.PackedDir, ev.Out = dir, packageDir, packedDir, evalDir
		ev.before, ev.start, ev.probe = stages, start, probe
		step("eval -> %s", evalDir)
		// eval's own artifact lines go nowhere: the pipeline prints its own summary. (No
		// plan/package/packed check here: all three were just made from this model.)
		if report, err = runEval(ctx, &Factory{In: f.In, Out: io.Discard, ErrOut: f.ErrOut, Getenv: f.Getenv}, &ev, dir); err != nil {
			return fmt.Errorf("eval: %w (the package in %s was written; nothing was published)", err, packageDir)
		}
	}

	var pushed *publishResult
	if o.Push {
		packedID := o.PackedRepoID
		if packedID == "" {
			packedID = emit.PackedRepoID(o.RepoID)
		}
		step("push -> %s (kernel package), %s (packed weights)", o.RepoID, packedID)
		pushed, err = publish(ctx, f, publishSet{PackageDir: packageDir, PackedDir: packedDir, SourceDir: dir,
			EvalFile: filepath.Join(evalDir, "eval.json")}, publishOptions{
			RepoID: o.RepoID, PackedRepoID: packedID, Private: o.Private, Model: modelLabel(o.Model, pl),
			SourceRepo: o.SourceRepo,
		})
		if err != nil {
			return fmt.Errorf("push: %w", err)
		}
	}

	step("done")
	arts := pipelineArtifacts{
		Model: dir, Plan: filepath.Join(packedDir, "plan.yaml"), Packed: packedDir, Package: packageDir, Kernel: emitted.Name,
	}
	if report != nil {
		arts.Eval, arts.Report, arts.Plots = filepath.Join(evalDir, "eval.json"), report.Markdown, report.Plots
	}
	if pushed != nil {
		arts.Published = pushed.Kernel.URL
		if pushed.Packed != nil {
			arts.PublishedPacked = pushed.Packed.URL
		}
	}
	if o.JSON {
		return writeJSON(f.Out, arts)
	}
	fmt.Fprintf(f.Out, "model      %s\n", arts.Model)
	fmt.Fprintf(f.Out, "plan       %s\n", arts.Plan)
	fmt.Fprintf(f.Out, "packed     %s: %s, %s\n", packedDir, pl.Counts().TensorsString(), models.HumanBytes(pres.OutputBytes))
	fmt.Fprintf(f.Out, "package    %s (%s, %d files)\n", packageDir, emitted.Name, len(emitted.Files))
	if report != nil {
		fmt.Fprintf(f.Out, "eval       %s\n", arts.Eval)
		fmt.Fprintf(f.Out, "report     %s\n", arts.Report)
		for _, p := range arts.Plots {
			fmt.Fprintf(f.Out, "plot       %s\n", p)
		}
	} else {
		fmt.Fprintf(f.Out, "eval       skipped (--skip-eval)\n")
	}
	if report != nil {
		if r, err := harness.ReadResult(arts.Eval); err == nil {
			writeRunSummary(f.Out, r, out, o.Eval.Device)
		}
	}
	if pushed != nil {
		fmt.Fprintf(f.Out, "published  %s (branch %s)\n", pushed.Kernel.URL, pushed.Kernel.Branch)
		if pushed.Packed != nil {
			fmt.Fprintf(f.Out, "published  %s (packed weights)\n", pushed.Packed.URL)
		}
	}
	return nil
}

// pipelineArtifacts is the --json summary of a pipeline run (empty fields: not produced).
type pipelineArtifacts struct {
	Model     string   `json:"model"`
	Plan      string   `json:"plan"`
	Packed    string   `json:"packed"`
	Package   string   `json:"package"`
	Kernel    string   `json:"kernel"`
	Eval      string   `json:"eval,omitempty"`
	Report    string   `json:"report,omitempty"`
	Plots     []string `json:"plots,omitempty"`
	Published string   `json:"published,omitempty"`
	// PublishedPacked is the packed weights' model repo.
	PublishedPacked string `json:"published_packed,omitempty"`
}

// removeIfBare removes a run folder that holds nothing but its marker.
func removeIfBare(dir string, inputs []outdir.Input) {
	if ents, err := os.ReadDir(dir); err == nil && len(ents) == 1 && ents[0].Name() == outdir.MarkerFile {
		outdir.Remove(dir, outdir.Options{Kind: outdir.KindPipeline, Inputs: inputs})
	}
}

// pipelineOut is the run folder: --out, else out/<kernel name>.
func pipelineOut(out, name string) string {
	if out == "" {
		return filepath.Join("out", name)
	}
	return out
}

// checkPipelineOut checks a run folder and its parts: the run folder is xpuinject's (or
// new), each part is missing, empty, or an earlier run's, replaced only with force.
func checkPipelineOut(out string, force bool, inputs []outdir.Input) error {
	if err := outdir.Check(out, outdir.Options{Kind: outdir.KindPipeline, Replace: true, Inputs: inputs}); err != nil {
		return err
	}
	for _, p := range []struct{ dir, kind string }{
		{filepath.Join(out, "packed"), outdir.KindPacked},
		{filepath.Join(out, "package"), outdir.KindPackage},
		{filepath.Join(out, "eval"), outdir.KindEval},
	} {
		if err := outdir.Check(p.dir, outdir.Options{Kind: p.kind, Replace: force, Inputs: inputs}); err != nil {
			return err
		}
	}
	return nil
}

// argLabel is modelLabel from the MODEL argument alone, before it is resolved: a local
// folder's name (and the folder), a preset's or org/name's repository. ok is false when
// the argument is none of these (resolveModel then says why).
func argLabel(arg string) (label, local string, ok bool) {
	if st, err := os.Stat(arg); err == nil {
		if !st.IsDir() {
			return "", "", false
		}
		abs, err := filepath.Abs(arg)
		if err != nil {
			return "", "", false
		}
		return filepath.Base(filepath.Clean(arg)), abs, true
	}
	name, _, _ := strings.Cut(arg, "@")
	if p, ok := lookupPreset(name); ok {
		return p.Ref().Repo, "", true
	}
	if r, err := hub.ParseRef(arg); err == nil {
		return r.Repo, "", true
	}
	return "", "", false
}

// writeRunSummary ends a pipeline run with what its numbers mean: the injected / stock
// accuracy ratios, whether the weights are random (then only the ratios mean something),
// and the next command to run.
func writeRunSummary(w io.Writer, r *harness.Result, out, device string) {
	var parts []string
	for _, m := range []struct{ key, name string }{{"max_abs", "max abs"}, {"mean_abs", "mean abs"}, {"kl", "KL"}} {
		if c, ok := r.Accuracy.Compare[m.key]; ok && c.Ratio != nil {
			parts = append(parts, fmt.Sprintf("%s %.2f×", m.name, float64(*c.Ratio)))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "accuracy   injected / stock %s error: %s (1×: no cost)\n",
			r.HalfDtype(), strings.Join(parts, ", "))
	}
	if r.Untrained() {
		p := float64(*r.Accuracy.OraclePerplexity)
		fmt.Fprintf(w, "note       random or untrained weights: the fp32 model predicts the text no better than\n"+
			"           chance (perplexity %.0f, vocabulary %d), so perplexity, relative errors and\n"+
			"           generated text mean nothing here; read the ratios above\n", p, r.Model.VocabSize)
	}
	gen := fmt.Sprintf("xpuinject generate %s --prompt \"Hello\"", out)
	if device == "cpu" || r.Device.Type == "cpu" {
		gen += " --device cpu --max-new-tokens 8"
	}
	if r.Model.Arch != "levit" {
		fmt.Fprintf(w, "next       %s\n", gen)
	}
	if r.Untrained() {
		fmt.Fprintf(w, "           a real model: xpuinject llama --out out/llama (GPU; docs/gpu.md)\n")
	}
}
