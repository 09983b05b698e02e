package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/harness"
	"github.com/xpuinject/xpuinject/inject/emit"
	"github.com/xpuinject/xpuinject/inject/outdir"
	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// evalOptions are the flags of `xpuinject eval`.
type evalOptions struct {
	Model       string
	PackageDir  string
	PackedDir   string
	Out         string
	Python      string
	Device      string
	Text        string
	Tokens      int
	GenTokens   int
	Latency     string
	Repeats     int
	DecodeSteps int
	Autotune    bool
	Points      string // latency points preset: quick or full
	// CompileAhead compiles the compiled latency paths in helper processes during the earlier
	// stages, which then time them (single-GPU runs).
	CompileAhead bool
	Prefill      []int // prompt lengths timed (nil: the preset's)
	Decode       []int // batch sizes of the timed decode steps (nil: the preset's)
	JSON         bool  // print where the results went as JSON (eval's own flag)
	GPUs         int   // pipeline stages, one device each (0: as many as the models need)
	// The pipeline's own stages before the eval and its start, so that the report's "Where the
	// time went" covers the whole run (zero: the eval's).
	before []harness.StageTime
	start  time.Time
	probe  <-chan probed // the pipeline's probe, run beside its pack (nil: probe here)
}

// probed is a Python interpreter found and probed, or why not.
type probed struct {
	py  string
	env *harness.Env
	err error
}

func findAndProbe(ctx context.Context, explicit string, getenv func(string) string) probed {
	py, err := harness.FindPython(explicit, getenv)
	if err != nil {
		return probed{err: err}
	}
	env, err := harness.Probe(ctx, py)
	return probed{py: py, env: env, err: err}
}

var (
	evalDevices   = []string{"auto", "cuda", "xpu", "cpu"}
	latencyModes  = []string{"auto", "eager", "graph", "both", "off"}
	latencyPoints = []string{"quick", "full"}
)

func newEvalCmd(f *Factory) *cobra.Command { return newEvalCmdWith(f, nil) }

func newEvalCmdWith(f *Factory, runF func(context.Context, *evalOptions) error) *cobra.Command {
	o := &evalOptions{}
	cmd := &cobra.Command{
		Use:   "eval MODEL --package DIR --packed DIR --out DIR",
		Short: "whole-model accuracy and latency of the injected model against the original",
		Long: `Load MODEL three times (fp32 oracle; stock, and injected from the package's packed
weights, both in the plan's dtype, bf16 or fp16) in a Python subprocess and report accuracy
(logits error, top-1, KL, perplexity, greedy generation, per-layer error) and, on a GPU,
prefill/decode latency and peak memory: stock eager, stock compiled (StaticCache +
torch.compile, the fastest stock path), stock and injected under the package's graph
runtime, injected eager (--latency). Writes eval.json, report.md and PNG plots to --out.
On the CPU the kernels run under the Triton interpreter: accuracy only, on a short text.

The fp32 oracle is read from the checkpoint layer by layer, so it never needs the whole fp32
model in memory. With --gpus N (or when the two 16-bit models do not fit one GPU) they are
split into N pipeline stages, one process and GPU each, under torchrun; with --device cpu,
N processes talk over gloo.`,
		Example: `  xpuinject eval testdata/fixtures/llama-tiny --package out/package --packed out/packed \
      --out out/eval --device cpu
  xpuinject eval llama8b --package out/package --packed out/packed --out out/eval --gpus 2`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Model = args[0]
			if o.PackageDir == "" || o.PackedDir == "" || o.Out == "" {
				return &usageError{fmt.Errorf("--package, --packed and --out are required")}
			}
			if err := checkEvalFlags(o); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			_, err := evalRun(cmd.Context(), f, o)
			return err
		},
	}
	addEvalFlags(cmd, o)
	cmd.Flags().StringVar(&o.PackageDir, "package", "", "package folder (xpuinject package)")
	cmd.Flags().StringVar(&o.PackedDir, "packed", "", "packed checkpoint folder (xpuinject pack)")
	cmd.Flags().StringVar(&o.Out, "out", "", "folder for eval.json, report.md and plots")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print where the results went as JSON")
	return cmd
}

// addEvalFlags registers the flags eval shares with the whole pipeline.
func addEvalFlags(cmd *cobra.Command, o *evalOptions) {
	fl := cmd.Flags()
	fl.StringVar(&o.Python, "python", "", "Python interpreter (default: $XPUINJECT_PYTHON, the project's .venv, python3)")
	fl.StringVar(&o.Device, "device", "auto", "auto, cuda, xpu or cpu (cpu: Triton interpreter, accuracy only)")
	fl.StringVar(&o.Text, "text", "", "plain-text file for accuracy and perplexity (default: the shipped prose)")
	fl.IntVar(&o.Tokens, "tokens", 0, "tokens of text to evaluate (default 2048 on a GPU, 96 on cpu)")
	fl.IntVar(&o.GenTokens, "gen-tokens", 0, "greedy tokens to generate (default 128 on a GPU, 8 on cpu)")
	fl.StringVar(&o.Latency, "latency", "auto", "latency paths on a GPU: eager (stock, injected), graph (stock compiled, stock and injected under the graph runtime), both, or off; auto: graph where the device captures graphs, else eager")
	fl.IntVar(&o.Repeats, "repeats", 0, "timed calls per prefill point (default 30)")
	fl.IntVar(&o.DecodeSteps, "decode-steps", 0, "decode steps timed in a loop per decode point (default 100)")
	fl.BoolVar(&o.Autotune, "autotune", false, "autotune the kernel classes the GPU's shipped tuned configs do not "+
		"cover (default: a config derived from each shape, at once)")
	fl.StringVar(&o.Points, "latency-points", "quick", "latency points: quick (prefill 512, decode batch 1; "+
		"vision: batch 32) or full (adds decode batch 8; vision: batch 1); each point costs each compiled "+
		"path a compile; --prefill and --decode-batches replace its lists")
	fl.BoolVar(&o.CompileAhead, "compile-ahead", true, "compile the torch.compile latency paths in helper "+
		"processes while the accuracy stages run, and time them there (one GPU; needs their models' memory free)")
	fl.IntSliceVar(&o.Prefill, "prefill", nil, "prompt lengths whose prefill is timed, comma-separated "+
		"(default: --latency-points)")
	fl.IntSliceVar(&o.Decode, "decode-batches", nil, "batch sizes whose decode step is timed, comma-separated "+
		"(default: --latency-points)")
	fl.IntVar(&o.GPUs, "gpus", 0, "GPUs to split the stock and injected models over as pipeline stages, one process each under torchrun (0: one, or as many as they need; with --device cpu: processes over gloo)")
}

// checkEvalFlags validates the flags eval shares with the pipeline, before any work;
// --text becomes absolute.
func checkEvalFlags(o *evalOptions) error {
	if !slices.Contains(evalDevices, o.Device) {
		return &usageError{fmt.Errorf("--device %q: want one of auto, cuda, xpu, cpu", o.Device)}
	}
	if !slices.Contains(latencyModes, o.Latency) {
		return &usageError{fmt.Errorf("--latency %q: want one of auto, eager, graph, both, off", o.Latency)}
	}
	if !slices.Contains(latencyPoints, o.Points) {
		return &usageError{fmt.Errorf("--latency-points %q: want quick or full", o.Points)}
	}
	for _, c := range []struct {
		flag string
		n    int
	}{{"tokens", o.Tokens}, {"gen-tokens", o.GenTokens}, {"repeats", o.Repeats}, {"decode-steps", o.DecodeSteps}, {"gpus", o.GPUs}} {
		if err := checkCount(c.flag, c.n); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		flag string
		ns   []int
	}{{"prefill", o.Prefill}, {"decode-batches", o.Decode}} {
		for _, n := range c.ns {
			if n < 1 {
				return &usageError{fmt.Errorf("--%s %d: want whole numbers of at least 1", c.flag, n)}
			}
		}
	}
	if o.Text != "" {
		abs, err := checkTextFile(o.Text)
		if err != nil {
			return err
		}
		o.Text = abs
	}
	return nil
}

// evalRun checks that model, package and packed checkpoint belong together (PLAN.md,
// "Plan digest"), then runs the driver and writes the report.
func evalRun(ctx context.Context, f *Factory, o *evalOptions) (*harness.ReportFiles, error) {
	dir, _, err := resolveModel(ctx, f, o.Model)
	if err != nil {
		return nil, err
	}
	g, err := models.Load(dir)
	if err != nil {
		return nil, err
	}
	inputs := append(modelInputs(dir, g.Checkpoint),
		outdir.Input{Path: o.PackageDir, What: "the package"}, outdir.Input{Path: o.PackedDir, What: "the packed checkpoint"},
		outdir.Input{Path: o.Text, What: "the --text file"})
	if err := outdir.Check(o.Out, outdir.Options{Kind: outdir.KindEval, Replace: true, Inputs: inputs}); err != nil {
		return nil, err
	}
	if _, err := checkRun(g, dir, o.PackageDir, o.PackedDir); err != nil {
		return nil, err
	}
	return runEval(ctx, f, o, dir)
}

// checkRun checks, before any Python starts, that a package and packed weights belong to the
// model g (in modelDir) and to each other: the package's plan is one re-planning the model
// gives, its digest is recorded by the package and the packed weights, and the packed
// checkpoint holds every tensor the plan names.
func checkRun(g *models.Graph, modelDir, packageDir, packedDir string) (*emit.PackagePlan, error) {
	pp, err := emit.ReadPlan(packageDir)
	if err != nil {
		return nil, err
	}
	if err := plan.CheckMatches(pp.Plan, g); err != nil {
		return nil, fmt.Errorf("%w (package %s, model %s)", err, packageDir, modelDir)
	}
	if err := plan.CheckFields(pp.Plan, g, kernels.Default(), pp.File); err != nil {
		return nil, err
	}
	if err := pp.CheckDigests(packedDir); err != nil { // the package's digests, then contract.json's packed_checks
		return nil, err
	}
	return pp, nil
}

// runEval runs the driver on an already checked model/package/packed triple and writes the report.
func runEval(ctx context.Context, f *Factory, o *evalOptions, modelDir string) (*harness.ReportFiles, error) {
	began := time.Now()
	var p probed
	if o.probe != nil {
		p = <-o.probe
	} else {
		p = findAndProbe(ctx, o.Python, f.Getenv)
	}
	if p.err != nil {
		return nil, p.err
	}
	py, env := p.py, p.env
	switch {
	case o.Device == "cuda" && !env.CUDA:
		return nil, fmt.Errorf("--device cuda: %s sees no CUDA GPU (torch %s); use --device cpu for an interpreter run", py, env.Torch)
	case o.Device == "xpu" && !env.XPU:
		return nil, fmt.Errorf("--device xpu: %s sees no Intel XPU (torch %s needs XPU support and Intel's GPU driver)", py, env.Torch)
	case o.Device == "auto" && !env.CUDA && !env.XPU:
		fmt.Fprintln(f.ErrOut, "no GPU: evaluating on the CPU under the Triton interpreter (accuracy only, latency not measured)")
		o.Device = "cpu"
	}
	if env.Kernels == "" {
		fmt.Fprintln(f.ErrOut, "note: the kernels package is not installed; the package is imported from its variant folder directly")
	}
	stages, err := evalStages(f, o, env, modelDir)
	if err != nil {
		return nil, err
	}
	label := deviceLabel(o.Device, env)
	if stages > 1 {
		label += fmt.Sprintf(" ×%d (pipeline stages, torchrun)", stages)
	}
	fmt.Fprintf(f.ErrOut, "eval: %s (torch %s, transformers %s, triton %s) on %s\n", py, env.Torch, env.Transformers, env.Triton, label)
	start := o.start
	if start.IsZero() {
		start = began
	}
	before := append(slices.Clone(o.before), harness.StageTime{Stage: "find and probe Python", S: harness.Num(time.Since(began).Seconds())})
	_, files, err := harness.Run(ctx, harness.Options{
		Before: before, Start: start,
		Python: py, ModelDir: modelDir, PackageDir: o.PackageDir, PackedDir: o.PackedDir, OutDir: o.Out, Tool: tool(),
		Device: o.Device, Stages: stages, TextFile: o.Text, Tokens: o.Tokens, GenTokens: o.GenTokens, Latency: o.Latency,
		Repeats: o.Repeats, DecodeSteps: o.DecodeSteps, Autotune: o.Autotune,
		LatencyPoints: o.Points, Prefill: o.Prefill, DecodeBatches: o.Decode, NoCompileAhead: !o.CompileAhead,
		Progress: f.ErrOut,
	})
	if err != nil {
		return nil, err
	}
	if o.JSON {
		return files, writeJSON(f.Out, evalFiles{Eval: filepath.Join(o.Out, "eval.json"), Report: files.Markdown, Plots: files.Plots})
	}
	fmt.Fprintf(f.Out, "eval.json  %s/eval.json\nreport     %s\n", o.Out, files.Markdown)
	for _, p := range files.Plots {
		fmt.Fprintf(f.Out, "plot       %s\n", p)
	}
	return files, nil
}

// evalFiles is eval's --json result.
type evalFiles struct {
	Eval   string   `json:"eval"`
	Report string   `json:"report"`
	Plots  []string `json:"plots"`
}

// evalStages decides how many pipeline stages (devices, one process each) the eval runs: --gpus
// when given, else as many as the checkpoint's two 16-bit copies and the oracle's working set need
// on the visible GPUs (harness.StagesNeeded), one on the CPU.
func evalStages(f *Factory, o *evalOptions, env *harness.Env, modelDir string) (int, error) {
	gpu := o.Device == "cuda" || o.Device == "xpu" || (o.Device == "auto" && (env.CUDA || env.XPU))
	ck, err := models.Open(modelDir)
	if err != nil {
		return 0, err
	}
	vision := ck.ModelType == "levit"
	if o.GPUs > 1 && vision {
		return 0, &usageError{fmt.Errorf("--gpus %d: a %s model is not split into pipeline stages (it has no decoder layers); use --gpus 1", o.GPUs, ck.ModelType)}
	}
	if vision && (o.Prefill != nil || o.Decode != nil) {
		fmt.Fprintf(f.ErrOut, "note: --prefill and --decode-batches time a decoder; a %s model's batches are "+
			"--latency-points's (quick: 32; full: 1 and 32)\n", ck.ModelType)
	}
	if !gpu {
		return max(o.GPUs, 1), nil
	}
	if o.GPUs > len(env.GPUMemory) && len(env.GPUMemory) > 0 {
		return 0, fmt.Errorf("--gpus %d: %s sees %d GPU(s)", o.GPUs, env.Python, len(env.GPUMemory))
	}
	fp := harness.MeasureFootprint(ck)
	if o.GPUs == 0 && !vision {
		n, err := harness.StagesNeeded(fp, env.GPUMemory)
		if err != nil {
			return 0, err
		}
		if n > 1 {
			fmt.Fprintf(f.ErrOut, "eval: two 16-bit copies of %s do not fit one GPU of %s: %d pipeline stages (--gpus sets the number)\n",
				harness.GiB(fp.Weights), harness.GiB(env.GPUMemory[0]), n)
		}
		return n, nil
	}
	n := max(o.GPUs, 1)
	if len(env.GPUMemory) > 0 {
		if need := fp.PerDevice(n) + harness.Headroom(env.GPUMemory[0]); need > env.GPUMemory[0] {
			fmt.Fprintf(f.ErrOut, "warning: over %d GPU(s) the eval needs about %s per device, more than the %s each has\n",
				n, harness.GiB(need), harness.GiB(env.GPUMemory[0]))
		}
	}
	return n, nil
}

func deviceLabel(d string, env *harness.Env) string {
	if d == "cuda" || (d == "auto" && env.CUDA) {
		return "cuda (" + env.Device + ")"
	}
	return d
}
