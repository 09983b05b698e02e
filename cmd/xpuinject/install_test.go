package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's two install lines put a working xpuinject where PATH finds it: scripts/install
// DIR, and `go install ./cmd/xpuinject` into GOBIN.
func TestInstallPutsTheCLIOnPath(t *testing.T) {
	root, _ := filepath.Abs("../..")
	dir := filepath.Join(t.TempDir(), "bin")
	env := append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd := exec.Command(filepath.Join(root, "scripts", "install"), dir)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/install: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "installed "+dir+"/xpuinject (xpuinject version "+Version+")") ||
		!strings.Contains(string(out), "on PATH: run 'xpuinject --help'") {
		t.Errorf("scripts/install said:\n%s", out)
	}
	// found through PATH, from another folder
	v := exec.Command("sh", "-c", "command -v xpuinject && xpuinject --version")
	v.Env, v.Dir = env, t.TempDir()
	if got, err := v.Output(); err != nil || string(got) != dir+"/xpuinject\nxpuinject version "+Version+"\n" {
		t.Errorf("xpuinject --version on PATH: %q %v", got, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("install left %d entries in %s, want only xpuinject", len(ents), dir)
	}

	gobin := filepath.Join(t.TempDir(), "gobin")
	gi := exec.Command("go", "install", "./cmd/xpuinject")
	gi.Dir, gi.Env = root, append(os.Environ(), "GOBIN="+gobin, "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false")
	if out, err := gi.CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/xpuinject: %v\n%s", err, out)
	}
	if got, err := exec.Command(filepath.Join(gobin, "xpuinject"), "--version").Output(); err != nil ||
		string(got) != "xpuinject version "+Version+"\n" {
		t.Errorf("go-installed xpuinject --version: %q %v", got, err)
	}
}
