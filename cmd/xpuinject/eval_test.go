package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/harness"
)

// fakeDriverRun prepares a model, its package and packed checkpoint under a temporary root, and
// the fake Python that records the driver's arguments in argsFile.
func fakeDriverRun(t *testing.T) (root, m, pkg, packed, argsFile, py string) {
	t.Helper()
	root = t.TempDir()
	m, pkg, packed = prepared(t, root)
	argsFile = filepath.Join(root, "driver.args")
	t.Setenv("XPUINJECT_FAKE_PYTHON_ARGS", argsFile)
	t.Setenv("XPUINJECT_FAKE_PYTHON_FAIL", "")
	t.Setenv("XPUINJECT_FAKE_PYTHON_GPUS", "")
	return root, m, pkg, packed, argsFile, fakePythonExe(t)
}

// TestEvalGPUs: --gpus N > 1 runs the driver under torchrun, one worker per pipeline stage; a
// worker's own exit code (torchrun exits 1) decides the error; bad counts are refused.
func TestEvalGPUs(t *testing.T) {
	root, m, pkg, packed, argsFile, py := fakeDriverRun(t)
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

// --latency-points reaches the driver from eval and from the default command, --prefill and
// --decode-batches beside it only when given, --compile-ahead only when turned off; an unknown
// preset is refused, naming the flag.
func TestLatencyPointsReachTheDriver(t *testing.T) {
	root, m, pkg, packed, argsFile, py := fakeDriverRun(t)
	launched := func(args ...string) string {
		t.Helper()
		os.Remove(argsFile)
		if code, _, errOut := runCLI(t, nil, append(args, "--python", py, "--device", "cpu")...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		b, err := os.ReadFile(argsFile)
		if err != nil {
			t.Fatalf("%v: the driver did not run: %v", args, err)
		}
		return " " + strings.TrimSpace(string(b)) + " "
	}
	eval := func(out string, extra ...string) string {
		return launched(append([]string{"eval", m, "--package", pkg, "--packed", packed, "--out", filepath.Join(root, out)}, extra...)...)
	}
	for _, c := range []struct {
		got       string
		want, not []string
	}{
		{eval("e1"), []string{" --latency-points quick "}, []string{"--prefill", "--decode-batches", "--compile-ahead"}},
		{eval("e1b", "--compile-ahead=false"), []string{" --compile-ahead off "}, nil},
		{eval("e2", "--latency-points", "full", "--decode-batches", "4,2"),
			[]string{" --latency-points full ", " --decode-batches 4,2 "}, []string{"--prefill"}},
		{launched(m, "--out", filepath.Join(root, "run"), "--latency-points", "full", "--prefill", "64"),
			[]string{" --latency-points full ", " --prefill 64 "}, []string{"--decode-batches"}},
		{launched(m, "--out", filepath.Join(root, "run"), "--force"), []string{" --latency-points quick "}, nil},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.got, w) {
				t.Errorf("driver launched with %q, want %q", c.got, w)
			}
		}
		for _, n := range c.not {
			if strings.Contains(c.got, n) {
				t.Errorf("driver launched with %q, want no %s", c.got, n)
			}
		}
	}

	for _, args := range [][]string{
		{"eval", m, "--package", pkg, "--packed", packed, "--out", filepath.Join(root, "e3"), "--latency-points", "all"},
		{m, "--out", filepath.Join(root, "run2"), "--latency-points", "Full"},
	} {
		os.Remove(argsFile)
		code, _, errOut := runCLI(t, nil, append(args, "--python", py, "--device", "cpu")...)
		if want := fmt.Sprintf("--latency-points %q: want quick or full", args[len(args)-1]); code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("%v: exit %d, want 2 and %q: %s", args, code, want, errOut)
		}
		if _, err := os.Stat(argsFile); err == nil {
			t.Errorf("%v: the driver ran although the flag was refused", args)
		}
	}
}

// A vision model's batches come from --latency-points alone: --prefill and --decode-batches get a
// note saying so.
func TestVisionNotesDecoderPointFlags(t *testing.T) {
	var errOut strings.Builder
	f := &Factory{ErrOut: &errOut}
	dir := filepath.Join("..", "..", "testdata", "fixtures", "levit-tiny")
	for _, c := range []struct {
		o    evalOptions
		note bool
	}{
		{evalOptions{Device: "cpu", Points: "quick"}, false},
		{evalOptions{Device: "cpu", Points: "quick", Decode: []int{4}}, true},
		{evalOptions{Device: "cpu", Points: "full", Prefill: []int{64}}, true},
	} {
		errOut.Reset()
		if _, err := evalStages(f, &c.o, &harness.Env{}, dir); err != nil {
			t.Fatal(err)
		}
		want := "note: --prefill and --decode-batches time a decoder; a levit model's batches are " +
			"--latency-points's (quick: 32; full: 1 and 32)\n"
		if got := errOut.String(); (got == want) != c.note {
			t.Errorf("%+v: stderr %q, want the note: %v", c.o, got, c.note)
		}
	}
}
