package emit

import (
	"math"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/inject/plan"
)

func TestUsageSnippet(t *testing.T) {
	hubPlan := &plan.Plan{Arch: "llama", Source: plan.Source{Repo: "meta-llama/Llama-3.2-1B", Revision: "4e20de362430cd3b72f300e6b0f18e50e7166e08"}}
	got := UsageSnippet(hubPlan, Usage{ModelClass: "LlamaForCausalLM", KernelRepo: "org/k", Version: 2})
	want := "```python\nimport torch\nfrom kernels import get_kernel\nfrom transformers import LlamaForCausalLM\n\n" +
		"model = LlamaForCausalLM.from_pretrained(\"meta-llama/Llama-3.2-1B\", revision=\"4e20de362430cd3b72f300e6b0f18e50e7166e08\", " +
		"dtype=torch.bfloat16).to(\"cuda\").eval()  # or \"xpu\"\n" +
		"xpuinject = get_kernel(\"org/k\", version=2, trust_remote_code=True)\n" +
		"xpuinject.inject(model, packed=\"org/k-packed\")\n```\n"
	if got != want {
		t.Errorf("snippet:\n%s\nwant:\n%s", got, want)
	}
	local := UsageSnippet(&plan.Plan{Arch: "levit", Source: plan.Source{Path: "/data/levit"}}, Usage{PackedRepo: "org/w"})
	for _, s := range []string{"from transformers import AutoModelForImageClassification\n", `from_pretrained("/data/levit", dtype=`,
		`get_kernel("ORG/NAME", version=1, trust_remote_code=True)`, `packed="org/w"`} {
		if !strings.Contains(local, s) {
			t.Errorf("local snippet lacks %q:\n%s", s, local)
		}
	}
	if PackedRepoID("") != "" || PackedRepoID("a/b") != "a/b-packed" {
		t.Error("PackedRepoID")
	}
}

func TestModelCardRecordsSourceAndEval(t *testing.T) {
	p := &plan.Plan{Arch: "llama", Source: plan.Source{Repo: "org/m", Revision: "abc"}}
	card := string(ModelCard(p, ModelCardOptions{
		RepoID: "org/k-packed", License: "apache-2.0", Tool: "xpuinject 1.2.3",
		Usage: Usage{ModelClass: "LlamaForCausalLM", KernelRepo: "org/k", Version: 1, PackedRepo: "org/k-packed"},
		Eval: &EvalSummary{Device: "NVIDIA H200",
			Accuracy: []EvalRow{{What: "mean_abs", Injected: 0.0123, Stock: 0.0145, Ratio: 0.848}, {What: "kl", Injected: 1e-5, Stock: 2e-5, Ratio: math.NaN()}},
			Latency:  []EvalRow{{What: "prefill 512 tokens, batch 1", Ratio: 0.91}}, LatencyMethod: "one loop for every path"},
	}))
	for _, s := range []string{"---\nbase_model: org/m\nlicense: apache-2.0\ntags:\n- xpuinject\n", "# org/k-packed\n",
		"The weights of `org/m` (revision `abc`) packed by xpuinject 1.2.3 for the kernel package [`org/k`](https://huggingface.co/kernels/org/k)",
		`xpuinject.inject(model, packed="org/k-packed")`, "## Evaluation of the run that packed these weights (NVIDIA H200)",
		"concatenated, bf16, K-major", "| metric | injected | stock bf16 | ratio |",
		"| mean_abs | 0.0123 | 0.0145 | 0.848 |", "| kl | 1e-05 | 2e-05 | - |", "| prefill 512 tokens, batch 1 | 0.91 |",
		"Timed: one loop for every path.\n"} {
		if !strings.Contains(card, s) {
			t.Errorf("card lacks %q:\n%s", s, card)
		}
	}
	bare := string(ModelCard(p, ModelCardOptions{Eval: &EvalSummary{Device: "cpu", LatencyNote: "no GPU"}}))
	if !strings.Contains(bare, "Latency was not measured: no GPU.") || strings.Contains(bare, "| metric |") {
		t.Errorf("card without numbers:\n%s", bare)
	}
	if strings.Contains(string(ModelCard(p, ModelCardOptions{})), "## Evaluation") {
		t.Error("a card without an eval has an evaluation section")
	}
}

// An fp16 plan's card names fp16 wherever it names the dtype: the packed tensors, the usage
// snippet and the eval table's stock column.
func TestModelCardFP16(t *testing.T) {
	p := &plan.Plan{Arch: "llama", DType: plan.DTypeFP16, Source: plan.Source{Repo: "org/m", Revision: "abc"}}
	card := string(ModelCard(p, ModelCardOptions{
		Usage: Usage{KernelRepo: "org/k"},
		Eval: &EvalSummary{Device: "NVIDIA H200", DType: "fp16",
			Accuracy: []EvalRow{{What: "mean_abs", Injected: 0.0123, Stock: 0.0145, Ratio: 0.848}}},
	}))
	for _, s := range []string{"concatenated, fp16, K-major", "dtype=torch.float16", "injected beside stock fp16 transformers",
		"| metric | injected | stock fp16 | ratio |"} {
		if !strings.Contains(card, s) {
			t.Errorf("card lacks %q:\n%s", s, card)
		}
	}
	if strings.Contains(card, "bf16") || strings.Contains(card, "bfloat16") {
		t.Errorf("an fp16 plan's card names bf16:\n%s", card)
	}
}

// Two packages of one model with different plans get different module ids: kernels imports a
// package under its id, so a shared id would hand one package the other's plan.
func TestEmitIDDependsOnPlan(t *testing.T) {
	a, b := emitTestPlan(), emitTestPlan()
	b.Layers[0].Kernel = "add-rmsnorm"
	id := func(p *plan.Plan) string {
		files, err := packageFiles(p, Options{Name: "xpuinject-x", Version: 1, License: "mit"})
		if err != nil {
			t.Fatal(err)
		}
		return string(files["build/torch-cuda/metadata.json"])
	}
	if id(a) == id(b) {
		t.Error("packages with different plans share a metadata id")
	}
	if id(a) != id(emitTestPlan()) {
		t.Error("the id is not a function of the sources and the plan")
	}
}
