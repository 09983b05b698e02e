package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/harness"
)

// TestEvalGPUs: --gpus N > 1 runs the driver under torchrun, one worker per pipeline stage; a
// worker's own exit code (torchrun exits 1) decides the error; bad counts are refused.
func TestEvalGPUs(t *testing.T) {
	root := t.TempDir()
	m, pkg, packed := prepared(t, root)
	argsFile := filepath.Join(root, "driver.args")
	t.Setenv("XPUINJECT_FAKE_PYTHON_ARGS", argsFile)
	t.Setenv("XPUINJECT_FAKE_PYTHON_FAIL", "")
	t.Setenv("XPUINJECT_FAKE_PYTHON_GPUS", "")
	py := fakePythonExe(t)
	eval := func(out string, extra ...string) (int, string) {
		t.Helper()
		os.Remove(argsFile)
		args := append([]string{"eval", m, "--package", pkg, "--packed", packed, "--out", filepath.Join(root, out), "--python", py}, extra...)
		code, _, errOut := runCLI(t, nil, args...)
		return code, errOut
	}
	launched := func() string {
		t.Helper()
		b, err := os.ReadFile(argsFile)
		if err != nil {
			t.Fatalf("the driver did not run: %v", err)
		}
		return strings.TrimSpace(string(b))
	}

	code, errOut := eval("e2", "--device", "cpu", "--gpus", "2")
	if code != 0 {
		t.Fatalf("--gpus 2: exit %d: %s", code, errOut)
	}
	got := launched()
	if want := "-m torch.distributed.run --standalone --nnodes 1 --nproc-per-node 2 "; !strings.HasPrefix(got, want) {
		t.Errorf("--gpus 2 launched %q, want it to start with %q", got, want)
	}
	if !strings.Contains(got, filepath.Join(".eval", "eval_driver.py")+" --model ") || !strings.Contains(got, "--device cpu") {
		t.Errorf("--gpus 2 launched %q", got)
	}
	if !strings.Contains(errOut, "on cpu ×2 (pipeline stages, torchrun)") {
		t.Errorf("stderr does not say how the eval runs:\n%s", errOut)
	}
	for _, f := range []string{"eval_driver.py", "eval_sharded.py", "latency.py", "prose.txt"} {
		if _, err := os.Stat(filepath.Join(root, "e2", ".eval", f)); err != nil {
			t.Errorf("the eval folder lacks .eval/%s: %v", f, err)
		}
	}

	if code, errOut = eval("e1", "--device", "cpu"); code != 0 {
		t.Fatalf("one process: exit %d: %s", code, errOut)
	}
	if got := launched(); !strings.HasSuffix(strings.Fields(got)[0], filepath.Join(".eval", "eval_driver.py")) {
		t.Errorf("one process launched %q, want the driver itself", got)
	}

	// torchrun exits 1 whatever its worker's code; the worker's 4 (injection) is what counts
	t.Setenv("XPUINJECT_FAKE_PYTHON_FAIL", "4")
	code, errOut = eval("e3", "--device", "cpu", "--gpus", "2")
	if code != 1 || !strings.Contains(errOut, "injection failed: rank 1 of 2: model.layers.1.mlp: fake failure") {
		t.Errorf("a failing worker: exit %d: %s", code, errOut)
	}
	if strings.Contains(errOut, "exit-code") {
		t.Errorf("the exit-code line is for the harness, not the user:\n%s", errOut)
	}
	t.Setenv("XPUINJECT_FAKE_PYTHON_FAIL", "")

	if code, errOut = eval("e4", "--device", "cpu", "--gpus", "-1"); code != 2 || !strings.Contains(errOut, "--gpus") {
		t.Errorf("--gpus -1: exit %d: %s", code, errOut)
	}

	// two GPUs of 150 GB: three are refused before the driver starts; the tiny model needs one
	t.Setenv("XPUINJECT_FAKE_PYTHON_GPUS", "150000000000,150000000000")
	if code, errOut = eval("e5", "--gpus", "3"); code != 1 || !strings.Contains(errOut, "--gpus 3:") || !strings.Contains(errOut, "sees 2 GPU(s)") {
		t.Errorf("--gpus 3 on two GPUs: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(argsFile); err == nil {
		t.Errorf("the driver ran although --gpus 3 was refused")
	}
	if code, errOut = eval("e6"); code != 0 {
		t.Fatalf("auto on two GPUs: exit %d: %s", code, errOut)
	}
	if got := launched(); strings.Contains(got, "torch.distributed.run") {
		t.Errorf("a model that fits one GPU was split: %q", got)
	}
}

// A packed card names the placement its latency ratios were measured on.
func TestEvalSummaryNamesThePipeline(t *testing.T) {
	r := &harness.Result{}
	r.Device.Type, r.Device.Name, r.Device.Count = "cuda", "NVIDIA H200", 2
	if got := evalSummary(r).Device; got != "NVIDIA H200 ×2, one pipeline stage each" {
		t.Errorf("device %q", got)
	}
	r.Device.Count = 1
	if got := evalSummary(r).Device; got != "NVIDIA H200" {
		t.Errorf("one device: %q", got)
	}
}
