package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/harness"
	"github.com/xpuinject/xpuinject/inject/emit"
	"github.com/xpuinject/xpuinject/models"
)

// generateOptions are the flags of `xpuinject generate`.
type generateOptions struct {
	Dir          string // a run folder (package/ + packed/) or a package folder
	Prompt       string
	MaxNewTokens int
	Stock        bool
	Model        string // default: the model the plan was made from
	PackedDir    string // default: the run's packed/, or the package's sibling packed/
	Python       string
	Device       string
	DoSample     bool
	Temperature  float64
	TopK         int
	TopP         float64
	Seed         int
	JSON         bool
}

func newGenerateCmd(f *Factory) *cobra.Command { return newGenerateCmdWith(f, nil) }

func newGenerateCmdWith(f *Factory, runF func(context.Context, *generateOptions) error) *cobra.Command {
	o := &generateOptions{}
	cmd := &cobra.Command{
		Use:   "generate PKG_OR_RUN_DIR --prompt TEXT",
		Short: "generate text with the injected model under the graph runtime, with its speed",
		Long: `Load the model a package was planned for, inject the package from its packed weights and
generate from --prompt with the package's graph runtime (a prefill, then decode steps
captured once as device graphs and replayed; eager where the device has no graphs). The
text is printed as it is generated; the run ends with tokens/s and ms/token (median
decode step), and with --stock the same for the stock model under the same runtime.

PKG_OR_RUN_DIR is what 'xpuinject MODEL --out DIR' wrote (DIR, holding package/ and
packed/) or a package folder (the packed weights then come from --packed or the folder's
sibling packed/). The model is the one recorded in the plan unless --model names another.`,
		Example: `  xpuinject generate out/llama --prompt "The capital of France is" --max-new-tokens 64 --stock
  xpuinject generate out/llama-odd --prompt "Hello" --device cpu --max-new-tokens 8`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Dir = args[0]
			if err := checkGenerateFlags(cmd, o); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return generateRun(cmd.Context(), f, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Prompt, "prompt", "", "text to continue (required)")
	fl.IntVar(&o.MaxNewTokens, "max-new-tokens", 128, "tokens to generate at most (an EOS ends earlier)")
	fl.BoolVar(&o.Stock, "stock", false, "also generate with the stock model, for its speed beside the injected one")
	fl.StringVar(&o.Model, "model", "", "model folder or Hub id (default: the one the plan was made from)")
	fl.StringVar(&o.PackedDir, "packed", "", "packed checkpoint folder (default: the run's packed/)")
	fl.StringVar(&o.Python, "python", "", "Python interpreter (default: $XPUINJECT_PYTHON, the project's .venv, python3)")
	fl.StringVar(&o.Device, "device", "auto", "auto, cuda, xpu or cpu (cpu: Triton interpreter, slow)")
	fl.BoolVar(&o.DoSample, "do-sample", false, "sample instead of greedy decoding")
	fl.Float64Var(&o.Temperature, "temperature", 0, "sampling temperature (default: the model's generation config, else 1)")
	fl.IntVar(&o.TopK, "top-k", -1, "sample from the k most likely tokens, 0 for all (default: the model's generation config, else 50)")
	fl.Float64Var(&o.TopP, "top-p", 0, "nucleus sampling mass in (0, 1] (default: the model's generation config, else 1)")
	fl.IntVar(&o.Seed, "seed", 0, "random seed for sampling")
	fl.BoolVar(&o.JSON, "json", false, "print the result as JSON (tokens, text, timings); the text streams to stderr")
	return cmd
}

// checkGenerateFlags refuses bad values before any model is loaded.
func checkGenerateFlags(cmd *cobra.Command, o *generateOptions) error {
	usage := func(format string, a ...any) error { return &usageError{fmt.Errorf(format, a...)} }
	switch {
	case !cmd.Flags().Changed("prompt"):
		return usage("--prompt TEXT is required")
	case strings.TrimSpace(o.Prompt) == "":
		return usage("--prompt is empty: give the text to continue")
	case o.MaxNewTokens < 1:
		return usage("--max-new-tokens %d: want a positive number of tokens", o.MaxNewTokens)
	case !slices.Contains(evalDevices, o.Device):
		return usage("--device %q: want one of auto, cuda, xpu, cpu", o.Device)
	case cmd.Flags().Changed("temperature") && !(o.Temperature > 0):
		return usage("--temperature %g: want a positive number", o.Temperature)
	case cmd.Flags().Changed("top-k") && o.TopK < 0:
		return usage("--top-k %d: want 0 (all tokens) or more", o.TopK)
	case cmd.Flags().Changed("top-p") && !(o.TopP > 0 && o.TopP <= 1):
		return usage("--top-p %g: want a value in (0, 1]", o.TopP)
	}
	for _, name := range []string{"temperature", "top-k", "top-p"} {
		if cmd.Flags().Changed(name) && !o.DoSample {
			return usage("--%s applies to sampling: add --do-sample", name)
		}
	}
	return nil
}

// generateTarget is what a generate run loads: the checkpoint, the package and its weights.
type generateTarget struct {
	ModelDir, PackageDir, PackedDir string
}

// resolveGenerate finds package, packed weights and model from the command's folder and flags,
// and checks that they belong together (headers only) before anything heavy starts.
func resolveGenerate(ctx context.Context, f *Factory, o *generateOptions) (*generateTarget, error) {
	st, err := os.Stat(o.Dir)
	if err != nil || !st.IsDir() {
		return nil, &usageError{fmt.Errorf("generate: %s: not a folder\n"+
			"give a run folder that 'xpuinject MODEL --out DIR' wrote, or the package folder in it", o.Dir)}
	}
	t := &generateTarget{}
	switch {
	case isFile(filepath.Join(o.Dir, "package", "plan.yaml")):
		t.PackageDir = filepath.Join(o.Dir, "package")
		t.PackedDir = filepath.Join(o.Dir, "packed")
	case isFile(filepath.Join(o.Dir, "plan.yaml")) && isDir(filepath.Join(o.Dir, "build")):
		t.PackageDir = o.Dir
		t.PackedDir = filepath.Join(filepath.Dir(filepath.Clean(o.Dir)), "packed")
	default:
		return nil, &usageError{fmt.Errorf("generate: %s is no run or package folder\n"+
			"want package/plan.yaml (a run folder) or plan.yaml and build/ (a package folder);\n"+
			"'xpuinject MODEL --out DIR' writes one", o.Dir)}
	}
	if o.PackedDir != "" {
		t.PackedDir = o.PackedDir
	}
	if !isDir(t.PackedDir) {
		return nil, fmt.Errorf("generate: no packed weights at %s: pass --packed DIR (the folder 'xpuinject pack' wrote)", t.PackedDir)
	}
	pp, err := emit.ReadPlan(t.PackageDir)
	if err != nil {
		return nil, err
	}
	pl := pp.Plan
	model := o.Model
	if model == "" {
		switch {
		case pl.Source.Path != "":
			model = pl.Source.Path
		case pl.Source.Repo != "":
			model = pl.Source.Repo
			if pl.Source.Revision != "" {
				model += "@" + pl.Source.Revision
			}
		default:
			return nil, fmt.Errorf("generate: the plan in %s names no source model: pass --model", t.PackageDir)
		}
	}
	if t.ModelDir, _, err = resolveModel(ctx, f, model); err != nil {
		return nil, fmt.Errorf("generate: model of the plan: %w (pass --model to use another copy)", err)
	}
	g, err := models.Load(t.ModelDir)
	if err != nil {
		return nil, err
	}
	if _, err := checkRun(g, t.ModelDir, t.PackageDir, t.PackedDir); err != nil {
		return nil, err
	}
	return t, nil
}

func isFile(p string) bool { st, err := os.Stat(p); return err == nil && !st.IsDir() }

func generateRun(ctx context.Context, f *Factory, o *generateOptions) error {
	t, err := resolveGenerate(ctx, f, o)
	if err != nil {
		return err
	}
	warnUntrained(f.ErrOut, t.PackageDir)
	py, err := harness.FindPython(o.Python, f.Getenv)
	if err != nil {
		return err
	}
	env, err := harness.Probe(ctx, py)
	if err != nil {
		return err
	}
	switch {
	case o.Device == "cuda" && !env.CUDA:
		return fmt.Errorf("--device cuda: %s sees no CUDA GPU (torch %s); use --device cpu for an interpreter run", py, env.Torch)
	case o.Device == "xpu" && !env.XPU:
		return fmt.Errorf("--device xpu: %s sees no Intel XPU (torch %s needs XPU support and Intel's GPU driver)", py, env.Torch)
	case o.Device == "auto" && !env.CUDA && !env.XPU:
		fmt.Fprintln(f.ErrOut, "no GPU: generating on the CPU under the Triton interpreter (slow; eager steps, no graphs)")
		o.Device = "cpu"
	}
	// With --json stdout is the one JSON document; the streamed text goes to stderr.
	text := f.Out
	if o.JSON {
		text = f.ErrOut
	}
	res, err := harness.Generate(ctx, harness.GenerateOptions{
		Python: py, ModelDir: t.ModelDir, PackageDir: t.PackageDir, PackedDir: t.PackedDir, Prompt: o.Prompt,
		MaxNewTokens: o.MaxNewTokens, Stock: o.Stock, Device: o.Device, DoSample: o.DoSample,
		Temperature: o.Temperature, TopK: o.TopK, TopP: o.TopP, Seed: o.Seed, Text: text, Progress: f.ErrOut,
	})
	if errors.Is(err, harness.ErrBadInput) {
		return &usageError{err}
	}
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSON(f.Out, res)
	}
	fmt.Fprintln(f.Out)
	fmt.Fprintln(f.Out, generationSummary("injected", res.Injected))
	if res.Stock != nil {
		fmt.Fprintln(f.Out, generationSummary("stock", res.Stock))
		if a, b := res.Injected.MSPerToken, res.Stock.MSPerToken; a != nil && b != nil && *b > 0 {
			fmt.Fprintf(f.Out, "injected / stock: %.2f× the time per token\n", float64(*a)/float64(*b))
		}
	}
	return nil
}

// generationSummary is one line: what ran, tokens, speed, one-time costs.
func generationSummary(name string, g *harness.Generation) string {
	how := "graph runtime"
	if !g.Graphs {
		how = "eager"
		if g.Reason != nil && *g.Reason != "" {
			how += ": " + *g.Reason
		}
	}
	speed := "no decode step"
	if g.MSPerToken != nil && g.TokensPerS != nil {
		speed = fmt.Sprintf("%.1f tokens/s, %.3f ms/token", float64(*g.TokensPerS), float64(*g.MSPerToken))
	}
	s := fmt.Sprintf("%-9s %d tokens: %s (%s)", name, g.NewTokens, speed, how)
	if g.PrefillMS != nil {
		s += fmt.Sprintf("; prefill %.1f ms", float64(*g.PrefillMS))
	}
	if g.Graphs {
		s += fmt.Sprintf("; capture %.2f s, once", float64(g.CaptureS))
	}
	return s
}

// warnUntrained says, before any text, when the run's eval found the model's weights random:
// its text is then noise by nature, not a sign that the kernels are wrong.
func warnUntrained(w io.Writer, packageDir string) {
	r, err := harness.ReadResult(filepath.Join(filepath.Dir(filepath.Clean(packageDir)), "eval", "eval.json"))
	if err != nil || !r.Untrained() {
		return
	}
	fmt.Fprintf(w, "note: random or untrained weights (the eval's fp32 perplexity %.0f, vocabulary %d):\n"+
		"the text below is noise whatever the kernels do; the eval's injected / stock ratios say what\n"+
		"they cost\n",
		float64(*r.Accuracy.OraclePerplexity), r.Model.VocabSize)
}
