package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/xpuinject/xpuinject/models"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// golden compares got with testdata/golden/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	goldenAt(t, filepath.Join("testdata", "golden", name), got)
}

func goldenAt(t *testing.T, path, got string) {
	t.Helper()
	name := filepath.Base(path)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/xpuinject -run %s -update to write it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test ./cmd/xpuinject -run %s -update rewrites it):\n%s\nwant:\n%s",
			name, t.Name(), got, want)
	}
}

// fitsWidth fails for every line wider than outputWidth.
func fitsWidth(t *testing.T, what, out string) {
	t.Helper()
	for i, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > outputWidth {
			t.Errorf("%s line %d is %d columns (> %d): %q", what, i+1, n, outputWidth, l)
		}
	}
}

// The plan table of every fixture and of Llama-3.2-1B's and Llama-3.1-8B's real shapes:
// grouped, footnoted, within outputWidth, as in the golden files. Each runs from the folder
// above the model, so the summary names it the same way on every machine.
func TestPlanTableGolden(t *testing.T) {
	golden0, _ := filepath.Abs(filepath.Join("testdata", "golden"))
	fixturesAbs, _ := filepath.Abs(fixtures)
	dirs, _ := filepath.Glob(filepath.Join(fixturesAbs, "*", "config.json"))
	cases := map[string]string{}
	for _, c := range dirs {
		cases[filepath.Base(filepath.Dir(c))] = filepath.Dir(c)
	}
	real := t.TempDir()
	for name, c := range map[string]llamaShape{
		"llama-3.2-1b-shaped": {hidden: 2048, inter: 8192, layers: 16, heads: 32, kv: 8, vocab: 128256, tied: true},
		"llama-3.1-8b-shaped": {hidden: 4096, inter: 14336, layers: 32, heads: 32, kv: 8, vocab: 128256},
	} {
		cases[name] = filepath.Join(real, name)
		headerOnlyLlama(t, cases[name], c)
	}
	if len(cases) < 9 {
		t.Fatalf("cases %v", cases)
	}
	for name, dir := range cases {
		t.Run(name, func(t *testing.T) {
			t.Chdir(filepath.Dir(dir))
			code, out, errOut := runCLI(t, nil, "plan", filepath.Base(dir))
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			fitsWidth(t, name, out)
			goldenAt(t, filepath.Join(golden0, "plan-"+name+".txt"), out)
		})
	}
}

// `xpuinject kernels` and `kernels --tuned`, with the default GPU's data and with none.
func TestKernelsTableGolden(t *testing.T) {
	for _, c := range []struct {
		name, gpu string
		tuned     bool
	}{{"kernels.txt", "", false}, {"kernels-no-data.txt", "no-such-gpu", false},
		{"kernels-tuned.txt", "", true}, {"kernels-tuned-no-data.txt", "no-such-gpu", true}} {
		args := []string{"kernels"}
		if c.gpu != "" {
			args = append(args, "--gpu", c.gpu)
		}
		if c.tuned {
			args = append(args, "--tuned")
		}
		code, out, errOut := runCLI(t, nil, args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		fitsWidth(t, c.name, out)
		golden(t, c.name, out)
	}
}

type llamaShape struct {
	hidden, inter, layers, heads, kv, vocab int64
	tied                                    bool
}

// headerOnlyLlama writes a bf16 Llama checkpoint of real shape whose tensor data is a hole
// (a sparse file): planning reads only the header.
func headerOnlyLlama(t *testing.T, dir string, c llamaShape) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "hidden_size": c.hidden,
		"intermediate_size": c.inter, "num_hidden_layers": c.layers, "num_attention_heads": c.heads,
		"num_key_value_heads": c.kv, "head_dim": c.hidden / c.heads, "vocab_size": c.vocab, "rms_norm_eps": 1e-5,
		"max_position_embeddings": 131072, "tie_word_embeddings": c.tied, "hidden_act": "silu",
		"attention_bias": false, "mlp_bias": false, "dtype": "bfloat16",
	}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var ts []*models.Tensor
	add := func(name string, shape ...int64) {
		ts = append(ts, &models.Tensor{Name: name, DType: models.BF16, Shape: shape})
	}
	hd := c.hidden / c.heads
	add("model.embed_tokens.weight", c.vocab, c.hidden)
	if !c.tied {
		add("lm_head.weight", c.vocab, c.hidden)
	}
	add("model.norm.weight", c.hidden)
	for l := int64(0); l < c.layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", c.hidden)
		add(p+"post_attention_layernorm.weight", c.hidden)
		add(p+"self_attn.q_proj.weight", c.heads*hd, c.hidden)
		add(p+"self_attn.k_proj.weight", c.kv*hd, c.hidden)
		add(p+"self_attn.v_proj.weight", c.kv*hd, c.hidden)
		add(p+"self_attn.o_proj.weight", c.hidden, c.heads*hd)
		add(p+"mlp.gate_proj.weight", c.inter, c.hidden)
		add(p+"mlp.up_proj.weight", c.inter, c.hidden)
		add(p+"mlp.down_proj.weight", c.hidden, c.inter)
	}
	fh, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	n, err := models.WriteHeader(fh, ts, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	var data int64
	for _, tt := range ts {
		e := int64(2)
		for _, s := range tt.Shape {
			e *= s
		}
		data += e
	}
	if err := fh.Truncate(n + data); err != nil {
		t.Fatal(err)
	}
}

// One output convention: every command that prints a result takes --json (one JSON document
// on stdout); none takes --format.
func TestEveryCommandTakesJSON(t *testing.T) {
	root := NewRootCmd(&Factory{})
	cmds := append(root.Commands(), root)
	if len(cmds) < 9 {
		t.Fatalf("%d commands", len(cmds))
	}
	for _, c := range cmds {
		if c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if c.Flags().Lookup("json") == nil {
			t.Errorf("%s has no --json", c.Name())
		}
		if c.Flags().Lookup("format") != nil {
			t.Errorf("%s has --format (the convention is --json, and plan's --yaml)", c.Name())
		}
	}
}

// pack, package and fetch --json: one document naming what was written.
func TestResultJSON(t *testing.T) {
	dir := filepath.Join(fixtures, "llama-tiny")
	abs, _ := filepath.Abs(dir)
	out := t.TempDir()
	code, stdout, errOut := runCLI(t, nil, "pack", dir, "--out", filepath.Join(out, "packed"), "--json")
	var p packSummary
	if code != 0 || json.Unmarshal([]byte(stdout), &p) != nil {
		t.Fatalf("pack: exit %d %q %s", code, stdout, errOut)
	}
	if p.Tensors < 10 || p.Bytes <= 0 || len(p.PlanSHA256) != 64 || !slices.Contains(p.Files, "plan.yaml") {
		t.Errorf("pack --json %+v", p)
	}
	code, stdout, errOut = runCLI(t, nil, "package", dir, "--out", filepath.Join(out, "package"), "--json")
	var k packageSummary
	if code != 0 || json.Unmarshal([]byte(stdout), &k) != nil {
		t.Fatalf("package: exit %d %q %s", code, stdout, errOut)
	}
	if k.Kernel != "xpuinject-llama-tiny" || k.Plan != "11 modules: 8 on our kernels, 3 kept; 10 layer bindings; packs 19 tensors (9 of kept modules)" || len(k.Files) < 20 {
		t.Errorf("package --json %+v", k)
	}
	code, stdout, _ = runCLI(t, nil, "fetch", dir, "--json")
	if code != 0 || strings.TrimSpace(stdout) != `{
  "dir": "`+abs+`"
}` {
		t.Errorf("fetch --json: exit %d %q", code, stdout)
	}
}
