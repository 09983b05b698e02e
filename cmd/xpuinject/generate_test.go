package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// makeRun writes a run folder (packed/ + package/) for a fixture with the pipeline, no eval.
func makeRun(t *testing.T, fixture string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "run")
	code, _, stderr := runCLI(t, nil, filepath.Join(fixtures, fixture), "--out", out, "--skip-eval")
	if code != 0 {
		t.Fatalf("pipeline: exit %d: %s", code, stderr)
	}
	return out
}

func TestGenerateUsageErrors(t *testing.T) {
	run := makeRun(t, "llama-odd")
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"generate", run}, exitUsage, "--prompt TEXT is required"},
		{[]string{"generate", run, "--prompt", ""}, exitUsage, "--prompt is empty"},
		{[]string{"generate", run, "--prompt", "  \n"}, exitUsage, "--prompt is empty"},
		{[]string{"generate", run, "--prompt", "hi", "--max-new-tokens", "-3"}, exitUsage, "--max-new-tokens -3: want a positive number"},
		{[]string{"generate", run, "--prompt", "hi", "--max-new-tokens", "0"}, exitUsage, "--max-new-tokens 0"},
		{[]string{"generate", run, "--prompt", "hi", "--max-new-tokens", "x"}, exitUsage, "invalid argument"},
		{[]string{"generate", run, "--prompt", "hi", "--device", "tpu"}, exitUsage, `--device "tpu"`},
		{[]string{"generate", run, "--prompt", "hi", "--do-sample", "--temperature", "0"}, exitUsage, "--temperature 0: want a positive number"},
		{[]string{"generate", run, "--prompt", "hi", "--do-sample", "--top-k", "-1"}, exitUsage, "--top-k -1"},
		{[]string{"generate", run, "--prompt", "hi", "--do-sample", "--top-p", "1.5"}, exitUsage, "--top-p 1.5: want a value in (0, 1]"},
		{[]string{"generate", run, "--prompt", "hi", "--top-p", "0.9"}, exitUsage, "--top-p applies to sampling: add --do-sample"},
		{[]string{"generate", "--prompt", "hi"}, exitUsage, "missing PKG_OR_RUN_DIR"},
		// past the flags: the folder is checked before Python is looked for
		{[]string{"generate", filepath.Join(t.TempDir(), "none"), "--prompt", "hi"}, exitUsage, "not a folder"},
		{[]string{"generate", t.TempDir(), "--prompt", "hi"}, exitUsage, "is no run or package folder\nwant package/plan.yaml"},
	} {
		code, stdout, stderr := runCLI(t, nil, c.args...)
		if code != c.code || !strings.Contains(stderr, c.msg) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit %d and %q", c.args, code, stderr, stdout, c.code, c.msg)
		}
	}
}

func TestGenerateFlags(t *testing.T) {
	var got *generateOptions
	f := &Factory{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}, Getenv: func(string) string { return "" }}
	cmd := newGenerateCmdWith(f, func(_ context.Context, o *generateOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"out/x", "--prompt", "Once upon", "--max-new-tokens", "7", "--stock", "--do-sample",
		"--temperature", "0.7", "--top-k", "0", "--top-p", "0.9", "--seed", "5", "--device", "cpu"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	want := generateOptions{Dir: "out/x", Prompt: "Once upon", MaxNewTokens: 7, Stock: true, Device: "cpu", DoSample: true,
		Temperature: 0.7, TopK: 0, TopP: 0.9, Seed: 5}
	if *got != want {
		t.Errorf("options %+v\nwant %+v", *got, want)
	}
	got = nil
	cmd = newGenerateCmdWith(f, func(_ context.Context, o *generateOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"out/x", "--prompt", "a"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	// unset sampling settings reach the driver as "the model's generation config"
	if got.MaxNewTokens != 128 || got.TopK != -1 || got.Temperature != 0 || got.TopP != 0 || got.Device != "auto" {
		t.Errorf("defaults %+v", *got)
	}
}

func TestResolveGenerate(t *testing.T) {
	run := makeRun(t, "llama-odd")
	model, _ := filepath.Abs(filepath.Join(fixtures, "llama-odd"))
	f := &Factory{Getenv: func(string) string { return "" }}
	ctx := context.Background()

	// a run folder: its package/ and packed/, the model from the plan
	tg, err := resolveGenerate(ctx, f, &generateOptions{Dir: run})
	if err != nil {
		t.Fatal(err)
	}
	if tg.PackageDir != filepath.Join(run, "package") || tg.PackedDir != filepath.Join(run, "packed") || tg.ModelDir != model {
		t.Errorf("run folder: %+v", tg)
	}
	// a package folder: the sibling packed/
	tg, err = resolveGenerate(ctx, f, &generateOptions{Dir: filepath.Join(run, "package")})
	if err != nil || tg.PackedDir != filepath.Join(run, "packed") {
		t.Errorf("package folder: %+v, %v", tg, err)
	}
	// --packed elsewhere
	moved := filepath.Join(t.TempDir(), "weights")
	if err := os.Rename(filepath.Join(run, "packed"), moved); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveGenerate(ctx, f, &generateOptions{Dir: run}); err == nil || !strings.Contains(err.Error(), "pass --packed DIR") {
		t.Errorf("missing packed/: %v", err)
	}
	tg, err = resolveGenerate(ctx, f, &generateOptions{Dir: run, PackedDir: moved})
	if err != nil || tg.PackedDir != moved {
		t.Errorf("--packed: %+v, %v", tg, err)
	}
	// another model than the plan's is refused with both named
	_, err = resolveGenerate(ctx, f, &generateOptions{Dir: run, PackedDir: moved, Model: filepath.Join(fixtures, "llama-tiny")})
	if err == nil || !strings.Contains(err.Error(), "llama-tiny") {
		t.Errorf("mismatched --model: %v", err)
	}
}
