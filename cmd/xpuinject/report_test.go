package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// report renders the same report.md an eval wrote, from its eval.json, into a new eval folder;
// it replaces an eval folder of its own, and refuses one that holds its input or is not ours.
func TestReportRendersFromEvalJSON(t *testing.T) {
	in := filepath.Join("..", "..", "harness", "testdata", "eval-moe-gpu.json")
	out := filepath.Join(t.TempDir(), "eval")
	code, stdout, stderr := runCLI(t, nil, "report", in, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### Stock on each experts implementation", "## Active-bytes roofline at batch 1"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	for _, f := range []string{"eval.json", "layers.png", "latency.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(stdout, "report -> "+filepath.Join(out, "report.md")) {
		t.Errorf("stdout %q", stdout)
	}
	code, stdout, stderr = runCLI(t, nil, "report", in, "--out", out, "--json")
	var res reportJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || res.Report != filepath.Join(out, "report.md") ||
		len(res.Plots) != 2 {
		t.Fatalf("replacing its own eval folder, --json: exit %d: %s %s", code, stdout, stderr)
	}
	if code, _, stderr = runCLI(t, nil, "report", filepath.Join(out, "eval.json"), "--out", out); code != 2 ||
		!strings.Contains(stderr, "contains EVAL_JSON") {
		t.Errorf("input inside --out: exit %d, %s", code, stderr)
	}
	foreign := t.TempDir()
	os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644)
	if code, _, stderr = runCLI(t, nil, "report", in, "--out", foreign); code == 0 {
		t.Errorf("wrote into a folder xpuinject did not write: %s", stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(foreign, "notes.txt")); string(b) != "mine" {
		t.Errorf("foreign folder changed")
	}
	bad := filepath.Join(t.TempDir(), "eval.json")
	os.WriteFile(bad, []byte("{"), 0o644)
	if code, _, stderr = runCLI(t, nil, "report", bad, "--out", filepath.Join(t.TempDir(), "e")); code != 2 ||
		!strings.Contains(stderr, "EVAL_JSON: ") || !strings.Contains(stderr, "not valid JSON") {
		t.Errorf("bad JSON: exit %d, %s", code, stderr)
	}
	if code, _, stderr = runCLI(t, nil, "report", in); code != 2 || !strings.Contains(stderr, "--out: required") {
		t.Errorf("no --out: exit %d, %s", code, stderr)
	}
}
