package emit

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"strings"

	"github.com/xpuinject/xpuinject/inject/plan"
)

// PackedRepoSuffix names the model repo of a kernel repo's packed weights by default:
// org/name -> org/name-packed.
const PackedRepoSuffix = "-packed"

// PackedRepoID is the default packed-weights repo for a kernel repo ("" for "").
func PackedRepoID(kernelRepo string) string {
	if kernelRepo == "" {
		return ""
	}
	return kernelRepo + PackedRepoSuffix
}

// Usage is what the cards' usage snippet names.
type Usage struct {
	// ModelClass is the transformers class to load the source model with (config.json's
	// architectures[0]); "" picks the Auto class for the plan's arch.
	ModelClass string
	// KernelRepo and Version locate the kernel package; PackedRepo the packed weights.
	KernelRepo string
	Version    int
	PackedRepo string
}

// UsageSnippet is the Python a user runs to inject the package with its packed weights:
// load the source model at the plan's revision, load the package with `kernels`, inject.
// get_kernel loads a repo of an untrusted publisher only with trust_remote_code=True
// (kernels 0.17 load.py get_kernel, hf_hub.py _check_trust_remote_code).
func UsageSnippet(pl *plan.Plan, u Usage) string {
	cls := u.ModelClass
	if cls == "" {
		cls = "AutoModelForCausalLM"
		if pl.Arch == "levit" {
			cls = "AutoModelForImageClassification"
		}
	}
	src := pl.Source.Repo
	if src == "" {
		src = pl.Source.Path
	}
	load := fmt.Sprintf("%q", src)
	if pl.Source.Repo != "" && pl.Source.Revision != "" {
		load += fmt.Sprintf(", revision=%q", pl.Source.Revision)
	}
	kernelRepo := cmp.Or(u.KernelRepo, "ORG/NAME")
	packed := cmp.Or(u.PackedRepo, PackedRepoID(kernelRepo))
	version := u.Version
	if version <= 0 {
		version = 1
	}
	var b strings.Builder
	b.WriteString("```python\nimport torch\nfrom kernels import get_kernel\n")
	fmt.Fprintf(&b, "from transformers import %s\n\n", cls)
	// the model runs in the plan's dtype: the packed tensors are in it
	torchDType := "torch.bfloat16"
	if pl.DType == plan.DTypeFP16 {
		torchDType = "torch.float16"
	}
	fmt.Fprintf(&b, "model = %s.from_pretrained(%s, dtype=%s).to(\"cuda\").eval()  # or \"xpu\"\n", cls, load, torchDType)
	fmt.Fprintf(&b, "xpuinject = get_kernel(%q, version=%d, trust_remote_code=True)\n", kernelRepo, version)
	fmt.Fprintf(&b, "xpuinject.inject(model, packed=%q)\n```\n", packed)
	return b.String()
}

// EvalSummary is what a model card records of the eval that produced the package.
type EvalSummary struct {
	// Device names where it ran ("NVIDIA H200", "cpu (Triton interpreter)").
	Device string
	// DType is what the stock and injected models ran in (eval.json model.dtype); "" reads
	// as bf16, the dtype of evals that did not record one.
	DType string
	// Accuracy: per error metric against the fp32 model, injected, stock and their ratio
	// (eval.json accuracy.compare), in the order given.
	Accuracy []EvalRow
	// Latency: per measured point, the headline ratio (injected graph / stock compiled where
	// both were measured) and which two paths it compares.
	Latency []EvalRow
	// LatencyNote says why latency is absent when it is.
	LatencyNote string
	// LatencyMethod is how every path was timed (eval.json latency.method).
	LatencyMethod string
}

// EvalRow is one line of an EvalSummary table.
type EvalRow struct {
	What            string
	Injected, Stock float64 // NaN when not applicable
	Ratio           float64
}

// ModelCardOptions say what the packed-weights repo's card names.
type ModelCardOptions struct {
	RepoID  string // the packed-weights repo
	Usage   Usage
	License string
	Tool    string // "xpuinject <version>"
	Eval    *EvalSummary
}

// ModelCard renders the README.md of the packed-weights model repo: how to use it, where
// the weights came from, what was transformed, and the eval of the run that made them.
func ModelCard(pl *plan.Plan, o ModelCardOptions) []byte {
	var b bytes.Buffer
	b.WriteString("---\n")
	if pl.Source.Repo != "" {
		fmt.Fprintf(&b, "base_model: %s\n", pl.Source.Repo)
	}
	if o.License != "" {
		fmt.Fprintf(&b, "license: %s\n", o.License)
	}
	b.WriteString("tags:\n- xpuinject\n- kernels\n- triton\n- xpu\n---\n\n")
	fmt.Fprintf(&b, "# %s\n\n", cmp.Or(o.RepoID, "packed weights"))
	src := cmp.Or(pl.Source.Repo, pl.Source.Path, pl.Arch)
	fmt.Fprintf(&b, "The weights of `%s`", src)
	if pl.Source.Revision != "" {
		fmt.Fprintf(&b, " (revision `%s`)", pl.Source.Revision)
	}
	fmt.Fprintf(&b, " packed by %s for the kernel package [`%s`](https://huggingface.co/kernels/%s): ",
		cmp.Or(o.Tool, "xpuinject"), cmp.Or(o.Usage.KernelRepo, "ORG/NAME"), cmp.Or(o.Usage.KernelRepo, "ORG/NAME"))
	fmt.Fprintf(&b, "BatchNorm folded, QKV and gate/up concatenated, %s, K-major, as its Triton kernels read them. ",
		cmp.Or(pl.DType, plan.DTypeBF16)) // a plan without a dtype was packed in bf16
	b.WriteString("`plan.yaml` says which module gets which layer and how each tensor was made; the package checks it " +
		"against its own before loading anything.\n\n")
	b.WriteString("## Usage\n\n")
	b.WriteString(UsageSnippet(pl, o.Usage))
	b.WriteString("\n`inject` downloads this repo into the Hugging Face cache, attaches the packed tensors to the " +
		"modules its plan names and releases the original projections. `kernels` and `transformers` are all it needs.\n\n")
	if o.Eval != nil {
		writeEvalSummary(&b, o.Eval)
	}
	return b.Bytes()
}

func writeEvalSummary(b *bytes.Buffer, e *EvalSummary) {
	fmt.Fprintf(b, "## Evaluation of the run that packed these weights (%s)\n\n", e.Device)
	if len(e.Accuracy) > 0 {
		dt := cmp.Or(e.DType, plan.DTypeBF16)
		fmt.Fprintf(b, "Error against the fp32 model, injected beside stock %s transformers "+
			"(ratio = injected / stock; below 1 is closer to fp32 than stock):\n\n", dt)
		fmt.Fprintf(b, "| metric | injected | stock %s | ratio |\n| --- | --- | --- | --- |\n", dt)
		for _, r := range e.Accuracy {
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", r.What, num(r.Injected), num(r.Stock), num(r.Ratio))
		}
		b.WriteString("\n")
	}
	if len(e.Latency) > 0 {
		b.WriteString("Latency, the first path's time over the second's (below 1 is faster):\n\n| point | ratio |\n| --- | --- |\n")
		for _, r := range e.Latency {
			fmt.Fprintf(b, "| %s | %s |\n", r.What, num(r.Ratio))
		}
		b.WriteString("\n")
		if e.LatencyMethod != "" {
			fmt.Fprintf(b, "Timed: %s.\n\n", e.LatencyMethod)
		}
	} else if e.LatencyNote != "" {
		fmt.Fprintf(b, "Latency was not measured: %s.\n\n", e.LatencyNote)
	}
}

func num(f float64) string {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "-"
	case f != 0 && (math.Abs(f) < 1e-3 || math.Abs(f) >= 1e5):
		return fmt.Sprintf("%.3g", f)
	}
	return fmt.Sprintf("%.4g", f)
}
