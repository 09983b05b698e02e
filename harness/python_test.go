package harness

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindPython(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "py")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	noexec := filepath.Join(dir, "noexec")
	os.WriteFile(noexec, []byte(""), 0o644)
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	if p, err := FindPython(exe, env(nil)); err != nil || p != exe {
		t.Errorf("explicit: %q %v", p, err)
	}
	if p, err := FindPython("", env(map[string]string{"XPUINJECT_PYTHON": exe})); err != nil || p != exe {
		t.Errorf("env: %q %v", p, err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), noexec, dir} {
		_, err := FindPython(bad, env(nil))
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: want an error naming it, got %v", bad, err)
		}
	}
	if _, err := FindPython("", env(map[string]string{"XPUINJECT_PYTHON": noexec})); err == nil || !strings.Contains(err.Error(), "XPUINJECT_PYTHON") {
		t.Errorf("bad $XPUINJECT_PYTHON: %v", err)
	}
}

func TestProbeNamesMissingPackages(t *testing.T) {
	// An interpreter that answers the probe with no packages at all.
	dir := t.TempDir()
	fake := filepath.Join(dir, "python")
	os.WriteFile(fake, []byte("#!/bin/sh\necho '{\"version\": \"3.12.0\", \"torch\": \"\", \"transformers\": \"5.17.0\", \"triton\": \"\", \"safetensors\": \"0.8\", \"kernels\": \"\", \"cuda\": false, \"xpu\": false}'\n"), 0o755)
	env, err := Probe(context.Background(), fake)
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "torch, triton") || !strings.Contains(err.Error(), "setup-venv.sh") {
		t.Fatalf("want ErrMissing naming torch and triton, got %v", err)
	}
	if env == nil || env.Transformers != "5.17.0" {
		t.Fatalf("env %+v", env)
	}
	broken := filepath.Join(dir, "broken")
	os.WriteFile(broken, []byte("#!/bin/sh\necho not json\n"), 0o755)
	if _, err := Probe(context.Background(), broken); err == nil || !strings.Contains(err.Error(), "unexpected probe output") {
		t.Fatalf("broken probe: %v", err)
	}
}

func TestRunRefusesMissingFolders(t *testing.T) {
	dir := t.TempDir()
	_, _, err := Run(context.Background(), Options{Python: "python3", ModelDir: dir, PackageDir: filepath.Join(dir, "nope"), PackedDir: dir, OutDir: dir})
	if err == nil || !strings.Contains(err.Error(), "package folder") {
		t.Fatalf("got %v", err)
	}
}
