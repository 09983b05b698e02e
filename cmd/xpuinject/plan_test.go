package main

import (
	"bytes"
	"context"
	"encoding/json"
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

func TestPlanTable(t *testing.T) {
	dir := filepath.Join(fixtures, "llama-odd")
	abs, _ := filepath.Abs(dir)
	code, out, errOut := runCLI(t, nil, "plan", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `MODULE                                   KIND        KERNEL             TRANSFORMS                               REASON
model.embed_tokens                       embedding   keep               cast-bf16                                a gather; nothing to gain
model.layers.0.input_layernorm           rmsnorm     rmsnorm            cast-bf16                                -
model.layers.0.self_attn                 attention   attention-prefill  concat-qkv,cast-bf16,prepack-kmajor      prefill runs attention-prefill, generation attention-decode; RoPE by rope; q/k/v and o projections by gemm
model.layers.0.post_attention_layernorm  rmsnorm     add-rmsnorm        cast-bf16                                fused with the residual add before it; the decoder layer is patched
model.layers.0.mlp                       mlp-swiglu  gemm               concat-gate-up,cast-bf16,prepack-kmajor  gate/up by one GEMM with the swiglu epilogue, down by a GEMM with the decoder layer's residual add in its epilogue
model.norm                               rmsnorm     rmsnorm            cast-bf16                                -
lm_head                                  lm-head     gemm               -                                        fp32 logits: the GEMM writes its fp32 accumulator, so near-equal logits keep their order instead of tying in bf16 (greedy decoding then follows the fp32 model further); reads the embedding table it is tied to (no tensor of its own)
7 layers, 6 replaced, 1 kept (llama, ` + abs + `)
`
	if out != want {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}
	if errOut != "" {
		t.Errorf("stderr: %q", errOut)
	}
}

func TestPlanDisable(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "plan", filepath.Join(fixtures, "llama-tiny"), "--disable", "gemm,add-rmsnorm")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, line := range []string{
		"model.layers.0.self_attn                 attention   keep     cast-bf16   kernel gemm disabled (attention-prefill uses it)",
		"model.layers.0.post_attention_layernorm  rmsnorm     rmsnorm  cast-bf16   kernel add-rmsnorm disabled; so rmsnorm",
		"model.layers.1.mlp                       mlp-swiglu  keep     cast-bf16   kernel gemm disabled",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("no line %q in\n%s", line, out)
		}
	}
	if !strings.Contains(out, "\n11 layers, 5 replaced, 6 kept (llama, ") {
		t.Errorf("summary wrong:\n%s", out)
	}
}

func TestPlanYAMLAndJSON(t *testing.T) {
	dir := filepath.Join(fixtures, "qwen2-tiny")
	abs, _ := filepath.Abs(dir)
	code, y, errOut := runCLI(t, nil, "plan", dir, "--format", "yaml")
	if code != 0 {
		t.Fatalf("yaml: exit %d: %s", code, errOut)
	}
	py, err := plan.ParseYAML([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	code, j, errOut := runCLI(t, nil, "plan", dir, "--format", "json")
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
		a.Reason != "attention-prefill: head_dim 16 not supported (supported: {32, 64, 80, 96, 128})" ||
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
		{[]string{"plan"}, "accepts 1 arg(s), received 0"},
		{[]string{"plan", dir, dir}, "accepts 1 arg(s), received 2"},
		{[]string{"plan", dir, "--format", "xml"}, `--format "xml": want one of table, yaml, json`},
		{[]string{"plan", dir, "--disable", "flash"}, `--disable "flash": no such kernel (kernels: rmsnorm, add-rmsnorm, rope, gemm, attention-prefill, attention-decode)`},
		{[]string{"plan", dir, "--bogus"}, "unknown flag: --bogus"},
		{[]string{"plan", "not a model"}, `not a model: "not a model": no local folder not a model, no preset not a model (presets: levit, llama, llama8b, mistral, qwen2, qwen3), and not org/name[@revision]`},
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
		arg, want string
	}{
		{empty, "folder has no config.json"},
		{file, "a file, not a folder"},
		{"./no/such/folder", "model ./no/such/folder: no local folder ./no/such/folder"},
		{bad, "models: no safetensors weights"},
	} {
		code, out, errOut := runCLI(t, nil, "plan", c.arg)
		if code != exitError1 || out != "" || !strings.Contains(errOut, c.want) {
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
	if !strings.HasSuffix(out, "\n11 layers, 8 replaced, 3 kept (llama, tiny-org/llama-tiny@"+sha+")\n") {
		t.Fatalf("summary:\n%s", out)
	}
	code, out, errOut = runCLI(t, env, "plan", "tiny-org/llama-tiny@"+sha, "--format", "json")
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
	cmd.SetArgs([]string{"llama", "--format", "json", "--disable", "gemm", "--disable", "rope"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.Model != "llama" || got.Format != "json" || !reflect.DeepEqual(got.Disable, []string{"gemm", "rope"}) {
		t.Fatalf("options %+v", got)
	}
}
