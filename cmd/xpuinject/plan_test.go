package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/xpuinject/xpuinject/inject/plan"
)

const fixtures = "../../testdata/fixtures"

// runCLI runs xpuinject with args against buffers and an environment map.
func runCLI(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	f := &Factory{In: strings.NewReader(""), Out: &out, ErrOut: &errOut, Getenv: func(k string) string { return env[k] }}
	code = Main(args, f)
	return code, out.String(), errOut.String()
}

// Layers alike but for their indices share a row; the pattern claims exactly their modules.
func TestGroupLayers(t *testing.T) {
	l := func(m string) plan.LayerPlan { return plan.LayerPlan{Module: m, Kind: "k", Kernel: "gemm"} }
	var ls []plan.LayerPlan
	for _, m := range []string{"m.layers.0.mlp", "m.layers.1.mlp", "m.layers.2.mlp", "m.layers.5.mlp", "e.emb_1", "e.emb_2",
		"s.0.l.1", "s.0.l.3", "s.1.l.1", "s.1.l.3", "t.0.l.1", "t.0.l.3", "t.1.l.1", "m.norm"} {
		ls = append(ls, l(m))
	}
	var got []string
	for _, g := range groupLayers(ls) {
		got = append(got, fmt.Sprintf("%s=%d", g.pattern, len(g.layers)))
	}
	want := "m.layers.{0-2,5}.mlp=4 e.emb_{1-2}=2 s.{0-1}.l.{1,3}=4 t.*.l.*=3 m.norm=1"
	if strings.Join(got, " ") != want {
		t.Fatalf("groups %s, want %s", strings.Join(got, " "), want)
	}
	other := l("m.layers.3.mlp")
	other.Reason = "differs"
	if gs := groupLayers([]plan.LayerPlan{l("m.layers.0.mlp"), other}); len(gs) != 2 {
		t.Fatalf("layers with different reasons grouped: %+v", gs)
	}
}

func TestPlanDisable(t *testing.T) {
	t.Chdir(fixtures)
	code, out, errOut := runCLI(t, nil, "plan", "llama-tiny", "--disable", "gemm,add-rmsnorm")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, line := range []string{
		"model.layers.{0-1}.post_attention_layernorm  2  rmsnorm     rmsnorm  cast-bf16                  [3]",
		"model.layers.{0-1}.mlp                       2  mlp-swiglu  keep     cast-bf16                  [4]",
		"[2] kernel gemm disabled (attention-prefill uses it)",
		"[3] kernel add-rmsnorm disabled; so rmsnorm",
		"[4] kernel gemm disabled",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("no line %q in\n%s", line, out)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(out), " "), " llama llama-tiny: 11 modules: 5 on our kernels, 6 kept; 5 layer bindings; "+
		"packs 21 tensors (16 of kept modules); dtype bf16; vendor routes measured on h200.") {
		t.Errorf("summary wrong:\n%s", out)
	}
}

func TestPlanYAMLAndJSON(t *testing.T) {
	dir := filepath.Join(fixtures, "qwen2-tiny")
	abs, _ := filepath.Abs(dir)
	code, y, errOut := runCLI(t, nil, "plan", dir, "--yaml")
	if code != 0 {
		t.Fatalf("yaml: exit %d: %s", code, errOut)
	}
	py, err := plan.ParseYAML([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	code, j, errOut := runCLI(t, nil, "plan", dir, "--json")
	if code != 0 {
		t.Fatalf("json: exit %d: %s", code, errOut)
	}
	var pj plan.Plan
	dec := json.NewDecoder(strings.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pj); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(py, &pj) {
		t.Fatal("yaml and json plans differ")
	}
	if py.Source.Path != abs || py.Tool != "xpuinject "+Version || py.Arch != "qwen2" || len(py.Layers) != 11 {
		t.Fatalf("plan header: %+v", py)
	}
	// The YAML is the golden plan but for tool and path.
	golden, err := os.ReadFile("../../inject/plan/testdata/golden/qwen2-tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var g plan.Plan
	if err := yaml.Unmarshal(golden, &g); err != nil {
		t.Fatal(err)
	}
	g.Tool, g.Source = py.Tool, py.Source
	if !reflect.DeepEqual(&g, py) {
		t.Fatal("CLI yaml differs from the golden plan")
	}
	// qwen2-tiny has head_dim 16, which the attention kernels lack: its attention is kept
	// and writes its seven tensors (q/k/v biases included) under their own names.
	a := py.Layers[2]
	if a.Module != "model.layers.0.self_attn" || a.Kernel != "keep" || len(a.Outputs) != 7 ||
		a.Reason != "attention-prefill: head_dim 16 not supported (supported: {32, 64, 80, 96, 128, 256})" ||
		a.Outputs[0].Name != "model.layers.0.self_attn.k_proj.bias" {
		t.Fatalf("qwen2 attention: %+v", a)
	}
	if m := py.Layers[4]; m.Kernel != "gemm" || m.Layer != "SwiGLUMLP" {
		t.Fatalf("qwen2 mlp: %+v", m)
	}
}

func TestPlanUsageErrors(t *testing.T) {
	dir := filepath.Join(fixtures, "llama-tiny")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"plan"}, "plan: missing MODEL: a model folder, a preset or org/name[@revision]"},
		{[]string{"plan", dir, dir}, "plan takes 1 argument(s), MODEL; got 2"},
		{[]string{"plan", dir, "--json", "--yaml"}, "--json and --yaml exclude each other"},
		{[]string{"plan", dir, "--dtype", "fp8"}, `--dtype "fp8": want auto, bf16 or fp16`},
		{[]string{"plan", dir, "--gpu", "H200"}, `--gpu: kernels: GPU name "H200": want lowercase letters, digits and dashes (known: h100, h200)`},
		{[]string{"plan", dir, "--disable", "flash"}, "--disable \"flash\": no such kernel\n(kernels: rmsnorm, add-rmsnorm, rmsnorm-add, rope, gemm, attention-prefill, attention-decode, moe)"},
		{[]string{"plan", dir, "--bogus"}, "unknown flag: --bogus"},
		{[]string{"plan", "not a model"}, `not a model: "not a model": no local folder, no preset and not org/name[@revision]` +
			"\n(presets: gemma2, gemma3, levit, llama, llama8b, mistral, mixtral, olmoe, phi3, phi4mini, qwen2,\nqwen3, qwen3moe, smollm3)"},
		{[]string{"plan", "llama@"}, `"llama@": empty revision after @`},
	} {
		code, out, errOut := runCLI(t, nil, c.args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, exitUsage, errOut)
		}
		if out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: stdout %q stderr %q, want %q", c.args, out, errOut, c.want)
		}
	}
}

func TestPlanModelErrors(t *testing.T) {
	empty := t.TempDir()
	file := filepath.Join(empty, "x.json")
	os.WriteFile(file, []byte("{}"), 0o644)
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "config.json"), []byte(`{"model_type": "gpt2"}`), 0o644)
	for _, c := range []struct {
		arg  string
		code int
		want string
	}{
		// A MODEL that is no model folder at all is bad usage, named with what to give.
		{empty, exitUsage, "folder has no config.json\ngive a Hugging Face model folder (config.json + safetensors)"},
		{file, exitUsage, "a file, not a folder; give the folder that holds config.json"},
		{"./no/such/folder", exitUsage, "model ./no/such/folder: no such folder\ngive a folder with config.json " +
			"and safetensors, a preset or org/name[@revision]\n(presets: gemma2,"},
		{"/nonexistent", exitUsage, "model /nonexistent: no such folder"},
		{bad, exitError1, "models: no safetensors weights"},
		{"../../testdata/quantized/llama-tiny-fp8", exitError1, "testdata/quantized/llama-tiny-fp8 is quantized (FP8: config.json quantization_config.quant_method \"fp8\""},
	} {
		code, out, errOut := runCLI(t, nil, "plan", c.arg)
		if code != c.code || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d stdout %q stderr %q, want %q", c.arg, code, out, errOut, c.want)
		}
	}
}

func TestPlanFromHFCache(t *testing.T) {
	cache := t.TempDir()
	sha := "0123456789abcdef0123456789abcdef01234567"
	repo := filepath.Join(cache, "models--tiny-org--llama-tiny")
	snap := filepath.Join(repo, "snapshots", sha)
	copyDir(t, filepath.Join(fixtures, "llama-tiny"), snap)
	os.MkdirAll(filepath.Join(repo, "refs"), 0o755)
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(sha), 0o644)
	env := map[string]string{"HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1"}

	code, out, errOut := runCLI(t, env, "plan", "tiny-org/llama-tiny")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.HasSuffix(strings.Join(strings.Fields(out), " "),
		" llama tiny-org/llama-tiny@"+sha+": 11 modules: 8 on our kernels, 3 kept; 10 layer bindings; "+
			"packs 19 tensors (9 of kept modules); dtype bf16; vendor routes measured on h200.") {
		t.Fatalf("summary:\n%s", out)
	}
	code, out, errOut = runCLI(t, env, "plan", "tiny-org/llama-tiny@"+sha, "--json")
	var p plan.Plan
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if p.Source != (plan.Source{Repo: "tiny-org/llama-tiny", Revision: sha}) {
		t.Fatalf("source %+v", p.Source)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPlanOptionsParsed(t *testing.T) {
	var got *planOptions
	cmd := newPlanCmdWith(&Factory{Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}, func(_ context.Context, o *planOptions) error {
		got = o
		return nil
	})
	cmd.SetArgs([]string{"llama", "--json", "--disable", "gemm", "--disable", "rope", "--dtype", "fp16", "--gpu", "h100"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	want := planFlags{Disable: []string{"gemm", "rope"}, GPU: "h100", DType: "fp16"}
	if got.Model != "llama" || !got.JSON || got.YAML || !reflect.DeepEqual(got.Plan, want) {
		t.Fatalf("options %+v", got)
	}
}
