package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/xpuinject/xpuinject/harness"
)

// A re-run over an earlier run without --force is refused before any work: no plan, no
// fetch, exit 2, and the message names the fix.
func TestPipelineRerunWithoutForceRefusedFirst(t *testing.T) {
	root := t.TempDir()
	m := copyFixture(t, "llama-tiny", filepath.Join(root, "llama-tiny"))
	out := filepath.Join(root, "run")
	if code, _, errOut := runCLI(t, nil, m, "--out", out, "--skip-eval"); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, errOut)
	}
	before, err := os.ReadFile(filepath.Join(out, "packed", "plan.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The default --out too (out/<kernel name>, from the folder's name), run from root.
	wd, _ := os.Getwd()
	if err := os.Chdir(root); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	if code, _, errOut := runCLI(t, nil, m, "--skip-eval"); code != 0 {
		t.Fatalf("default --out: exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{{m, "--out", out, "--skip-eval"}, {m, "--skip-eval"}} {
		code, stdout, errOut := runCLI(t, nil, args...)
		if code != exitUsage || stdout != "" || !strings.Contains(errOut, "--force") {
			t.Fatalf("%v: exit %d stdout %q stderr %q; want exit 2 naming --force", args, code, stdout, errOut)
		}
		if strings.Contains(errOut, "resolve ") || strings.Contains(errOut, "plan:") {
			t.Errorf("%v: refused only after work began:\n%s", args, errOut)
		}
	}
	after, _ := os.ReadFile(filepath.Join(out, "packed", "plan.yaml"))
	if string(after) != string(before) {
		t.Error("the refused run changed the earlier run's plan.yaml")
	}
}

// --push of a model from a local folder needs the Hub id its cards will name, asked for
// before any work; a malformed one is refused the same way.
func TestPipelinePushOfALocalFolderAsksForTheSourceRepo(t *testing.T) {
	tiny := filepath.Join(fixtures, "llama-tiny")
	out := filepath.Join(t.TempDir(), "run")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{tiny, "--out", out, "--push", "--repo-id", "a/b"}, "pass --source-repo-id ORG/NAME[@REVISION]"},
		{[]string{tiny, "--out", out, "--push", "--repo-id", "a/b", "--source-repo-id", "nope"},
			`--source-repo-id "nope": want ORG/NAME[@REVISION]`},
		{[]string{tiny, "--out", out, "--source-repo-id", "org/m"}, "--source-repo-id names the Hub model of a local"},
		{[]string{"org/m", "--out", out, "--push", "--repo-id", "a/b", "--source-repo-id", "org/m"},
			"drop it here"},
	} {
		code, stdout, errOut := runCLI(t, nil, c.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "resolve ") {
			t.Errorf("%v: exit %d stdout %q stderr %q; want exit 2 and %q before any work", c.args, code, stdout, errOut, c.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused run left %s", out)
	}
}

// A run ends with what its numbers mean: the ratios, a note when the weights are random, and
// the next command; a trained model's run has no note.
func TestRunSummary(t *testing.T) {
	r, err := harness.ReadResult("testdata/eval-random.json")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	writeRunSummary(&b, r, "out/demo", "auto")
	want := `accuracy   injected / stock bf16 error: max abs 0.91×, mean abs 0.93×, KL 0.87× (1×: no cost)
note       random or untrained weights: the fp32 model predicts the text no better than
           chance (perplexity 966, vocabulary 512), so perplexity, relative errors and
           generated text mean nothing here; read the ratios above
next       xpuinject generate out/demo --prompt "Hello" --device cpu --max-new-tokens 8
           a real model: xpuinject llama --out out/llama (GPU; docs/gpu.md)
`
	if b.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", b.String(), want)
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if n := utf8.RuneCountInString(line); n > maxColumns {
			t.Errorf("a line of %d columns: %s", n, line)
		}
	}
	*r.Accuracy.OraclePerplexity = 31.4 // a trained model: SmolLM2-135M's
	b.Reset()
	writeRunSummary(&b, r, "out/smol", "cuda")
	if strings.Contains(b.String(), "random") || strings.Contains(b.String(), "a real model") {
		t.Errorf("a trained model's summary:\n%s", b.String())
	}
}

// generate warns before the text when the run's eval found random weights.
func TestGenerateWarnsOfRandomWeights(t *testing.T) {
	run := t.TempDir()
	os.MkdirAll(filepath.Join(run, "eval"), 0o755)
	b, _ := os.ReadFile("testdata/eval-random.json")
	os.WriteFile(filepath.Join(run, "eval", "eval.json"), b, 0o644)
	var w strings.Builder
	warnUntrained(&w, filepath.Join(run, "package"))
	if !strings.HasPrefix(w.String(), "note: random or untrained weights (the eval's fp32 perplexity 966, vocabulary 512)") {
		t.Errorf("warning %q", w.String())
	}
	for _, line := range strings.Split(w.String(), "\n") {
		if n := utf8.RuneCountInString(line); n > maxColumns {
			t.Errorf("a warning line of %d columns: %s", n, line)
		}
	}
	w.Reset()
	warnUntrained(&w, filepath.Join(t.TempDir(), "package")) // no eval: nothing to say
	if w.Len() != 0 {
		t.Errorf("warning without an eval: %q", w.String())
	}
}

// package over an earlier package without --force is refused before planning too.
func TestPackageRerunWithoutForceRefusedFirst(t *testing.T) {
	m := filepath.Join(fixtures, "llama-tiny")
	out := filepath.Join(t.TempDir(), "pkg")
	if code, _, errOut := runCLI(t, nil, "package", m, "--out", out); code != 0 {
		t.Fatalf("first package: exit %d: %s", code, errOut)
	}
	// a plan flag that fails only when planning: the refusal must come first
	code, _, errOut := runCLI(t, nil, "package", m, "--out", out, "--gpu", "nosuchgpu")
	if code != exitUsage || !strings.Contains(errOut, "--force") || strings.Contains(errOut, "nosuchgpu") {
		t.Errorf("exit %d: %s; want the --out refusal before any planning", code, errOut)
	}
}

// Without --gpu, the pipeline plans with the data of the GPU its eval runs on, and says so;
// a device without data keeps the default and says that; the CPU and a missing Python say
// nothing (the eval reports those).
func TestPipelineEvalGPU(t *testing.T) {
	onGPU := func(name string) probed {
		return probed{py: "python3", env: &harness.Env{CUDA: true, Device: name}}
	}
	for _, c := range []struct {
		device string
		p      probed
		gpu    string
		note   string
	}{
		{"auto", onGPU("NVIDIA H100 80GB HBM3"), "h100", "gpu: NVIDIA H100 80GB HBM3, the eval's device: vendor routes of gpus/h100.json"},
		{"cuda", onGPU("NVIDIA H200"), "h200", "vendor routes of gpus/h200.json"},
		{"cuda", onGPU("NVIDIA A100-SXM4-80GB"), "", "gpu: no measured data for NVIDIA A100-SXM4-80GB (have: h100, h200): the plan takes h200's vendor routes"},
		{"cpu", onGPU("NVIDIA H100 80GB HBM3"), "", ""},
		{"auto", probed{py: "python3", env: &harness.Env{}}, "", ""},
		{"auto", probed{err: harness.ErrMissing}, "", ""},
	} {
		gpu, note := evalGPU(c.device, c.p)
		if gpu != c.gpu || !strings.Contains(note, c.note) || (c.note == "") != (note == "") {
			t.Errorf("evalGPU(%s, %+v) = %q, %q; want %q, a note with %q", c.device, c.p.env, gpu, note, c.gpu, c.note)
		}
	}
	for _, c := range []struct {
		args []string
		auto bool
	}{{nil, true}, {[]string{"--gpu", "h200"}, false}, {[]string{"--gpu", "b200"}, false}} {
		var got *pipelineOptions
		cmd := newPipelineCmdWith(&Factory{Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}, func(_ context.Context, o *pipelineOptions) error {
			got = o
			return nil
		})
		cmd.SetArgs(append([]string{"llama-tiny"}, c.args...))
		if err := cmd.Execute(); err != nil || got == nil || got.gpuAuto != c.auto {
			t.Errorf("%v: err %v, gpuAuto %v; want %v", c.args, err, got != nil && got.gpuAuto, c.auto)
		}
	}
}
