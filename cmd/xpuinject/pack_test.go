package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/inject/pack"
	"github.com/xpuinject/xpuinject/inject/plan"
)

func TestPackCommand(t *testing.T) {
	src := filepath.Join(fixtures, "llama-tiny")
	out := filepath.Join(t.TempDir(), "packed")
	code, stdout, stderr := runCLI(t, nil, "pack", src, "--out", out, "--max-shard-size", "100kB")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	abs, _ := filepath.Abs(out)
	want := abs + "\n  model-00001-of-00004.safetensors\n  model-00002-of-00004.safetensors\n" +
		"  model-00003-of-00004.safetensors\n  model-00004-of-00004.safetensors\n" +
		"  model.safetensors.index.json\n  plan.yaml\n"
	if stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, want)
	}
	if !strings.Contains(stderr, "pack [19/19] ") || !strings.Contains(stderr, "packed 19 tensors") {
		t.Errorf("stderr has no progress:\n%s", stderr)
	}
	b, err := os.ReadFile(filepath.Join(out, "plan.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.ParseYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := pack.Verify(pl, out); err != nil {
		t.Errorf("packed checkpoint does not match its plan: %v", err)
	}

	// --plan with the plan.yaml just written gives the same bytes
	out2 := filepath.Join(t.TempDir(), "again")
	code, _, stderr = runCLI(t, nil, "pack", src, "--out", out2, "--max-shard-size", "100kB", "--plan", filepath.Join(out, "plan.yaml"))
	if code != 0 {
		t.Fatalf("--plan: exit %d: %s", code, stderr)
	}
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		x, _ := os.ReadFile(filepath.Join(out, e.Name()))
		y, err := os.ReadFile(filepath.Join(out2, e.Name()))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between the planned run and the --plan run (%v)", e.Name(), err)
		}
	}
}

func TestPackCommandUsage(t *testing.T) {
	src := filepath.Join(fixtures, "llama-tiny")
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"pack", src}, exitUsage, "--out DIR is required"},
		{[]string{"pack", src, "--out", t.TempDir(), "--max-shard-size", "5 parsecs"}, exitUsage, "--max-shard-size"},
		{[]string{"pack", src, "--out", t.TempDir(), "--disable", "nope"}, exitUsage, `--disable "nope"`},
		{[]string{"pack", src, "--out", t.TempDir(), "--plan", "p.yaml", "--disable", "gemm"}, exitUsage, "exclude each other"},
		{[]string{"pack", "--out", t.TempDir()}, exitUsage, "pack: missing MODEL: a model folder"},
		{[]string{"pack", src, "--out", t.TempDir(), "--plan", filepath.Join(t.TempDir(), "missing.yaml")}, exitError1, "--plan"},
		{[]string{"pack", filepath.Join(t.TempDir(), "nothing-here"), "--out", t.TempDir()}, exitUsage, "nothing-here: no such folder"},
	} {
		code, stdout, stderr := runCLI(t, nil, c.args...)
		if code != c.code || !strings.Contains(stderr, c.msg) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit %d and %q", c.args, code, stderr, stdout, c.code, c.msg)
		}
	}
}
