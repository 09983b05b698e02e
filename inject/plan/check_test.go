package plan

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// TestCheckPlanFields: hand edits of plan.yaml are caught and named by field; the plan
// as written, and one made with --disable, pass.
func TestCheckPlanFields(t *testing.T) {
	g, err := models.Load("../../testdata/fixtures/llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{}, {Disable: []string{"add-rmsnorm", "gemm"}}, {DType: DTypeFP16}} {
		disable := o.Disable
		o.Tool = "xpuinject test"
		p, err := New(g, nil, o)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := MarshalYAML(p)
		back, err := ParseYAML(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckFields(back, g, kernels.Default(), "pkg/plan.yaml"); err != nil {
			t.Errorf("disable %v dtype %q: the plan as written fails: %v", disable, o.DType, err)
		}
	}
	p, _ := New(g, nil, Options{Tool: "xpuinject test"})
	b, _ := MarshalYAML(p)
	text := string(b)
	for _, c := range []struct {
		name, from, to, want string
	}{
		{"unknown kernel", "kernel: rmsnorm\n", "kernel: fancynorm\n",
			`pkg/plan.yaml: layers[1] (model.layers.0.input_layernorm): kernel "fancynorm" is not a known kernel`},
		{"other known kernel", "kernel: rmsnorm\n", "kernel: add-rmsnorm\n",
			`pkg/plan.yaml: layers[1] (model.layers.0.input_layernorm): kernel "add-rmsnorm", re-planning the model gives "rmsnorm"`},
		{"layout", "layout: k-major\n", "layout: row-major\n",
			`outputs[0] (model.layers.0.mlp.gate_up_proj.weight): layout "row-major", re-planning the model gives "k-major"`},
		{"unknown layout", "layout: k-major\n", "layout: diagonal\n", `layout "diagonal" is not a known layout`},
		{"eps", "eps: 1e-06\n", "eps: 0.5\n",
			`pkg/plan.yaml: layers[1] (model.layers.0.input_layernorm): eps 0.5, re-planning the model gives 1e-06`},
		{"shape", "shape: [64]\n", "shape: [32]\n", "shape [32], re-planning the model gives [64]"},
		{"disable", "backends: [cuda, xpu]\n", "backends: [cuda, xpu]\ndisable: [rmsnorm]\n",
			`layers[1] (model.layers.0.input_layernorm): kernel "rmsnorm", re-planning the model gives "keep"`},
		{"unknown disable", "backends: [cuda, xpu]\n", "backends: [cuda, xpu]\ndisable: [warp]\n", `disable: "warp" is not a known kernel`},
		{"backends", "backends: [cuda, xpu]\n", "backends: [cuda]\n", "backends [cuda], re-planning the model gives [cuda, xpu]"},
		{"dtype", "dtype: bf16\n", "dtype: fp16\n", `outputs[0] (model.embed_tokens.weight): transforms [cast-bf16], re-planning the model gives [cast-fp16]`},
		{"unknown dtype", "dtype: bf16\n", "dtype: fp8\n", `dtype "fp8": want bf16 or fp16`},
		{"bad gpu name", "gpu: h200\n", "gpu: H100\n", `gpu: kernels: GPU name "H100"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(text, c.from) {
				t.Fatalf("plan has no %q", c.from)
			}
			edited, err := ParseYAML([]byte(strings.Replace(text, c.from, c.to, 1)))
			if err != nil {
				t.Fatal(err)
			}
			err = CheckFields(edited, g, nil, "pkg/plan.yaml")
			if !errors.Is(err, ErrEdited) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v\nwant %q", err, c.want)
			}
		})
	}
	// another GPU re-plans with that GPU's routes: none here, so the plan is the same
	other, _ := ParseYAML([]byte(strings.Replace(text, "gpu: h200\n", "gpu: h100\n", 1)))
	if err := CheckFields(other, g, nil, "pkg/plan.yaml"); err != nil {
		t.Errorf("plan for a GPU without data: %v", err)
	}
	// a reason reworded is provenance, not a field the Python side reads
	reworded, _ := ParseYAML([]byte(strings.Replace(text, "reason: a gather; nothing to gain", "reason: mine", 1)))
	if err := CheckFields(reworded, g, nil, "pkg/plan.yaml"); err != nil {
		t.Errorf("reworded reason: %v", err)
	}
}

// TestPlanYAMLErrors: decoding errors speak of YAML kinds and fields, not Go types.
func TestPlanYAMLErrors(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"schema: 1\nfancy: 2\n", `line 2: unknown field "fancy"`},
		{"schema: 1\nlayers:\n  - module: m\n    eps: big\n", "line 4: expected a number, got a string (big)"},
		{"schema: 1\nlayers: {a: 1}\n", "line 2: expected a list, got a mapping"},
		{"schema: [1]\n", "line 1: expected an integer, got a list"},
	} {
		_, err := ParseYAML([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.doc, err, c.want)
			continue
		}
		for _, gotype := range []string{"inject.", "float64", "int64", "[]", "map["} {
			if strings.Contains(err.Error(), gotype) {
				t.Errorf("%q: error %q shows a Go type", c.doc, err)
			}
		}
	}
}

// TestCheckPlanFieldsEveryFixture: the plan of every fixture, as written, passes the check
// eval runs on a package's plan (every transform it writes is one the check knows).
func TestCheckPlanFieldsEveryFixture(t *testing.T) {
	ents, err := os.ReadDir("../../testdata/fixtures")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		g, err := models.Load("../../testdata/fixtures/" + e.Name())
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		p, err := New(g, nil, Options{Tool: "xpuinject test"})
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		b, _ := MarshalYAML(p)
		back, err := ParseYAML(b)
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if err := CheckFields(back, g, kernels.Default(), "pkg/plan.yaml"); err != nil {
			t.Errorf("%s: the plan as written fails: %v", e.Name(), err)
		}
		n++
	}
	if n < 29 {
		t.Fatalf("checked %d fixtures, want every one of testdata/fixtures (29 or more)", n)
	}
}
