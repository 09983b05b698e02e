package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Killed at random moments with SIGKILL, then run again: the second run's output is
// byte-identical to an uninterrupted run's, nothing is left beside it, and no child
// process outlives the killed CLI. Each kill moment is drawn uniformly from the length
// of a clean run; the seed is logged, and setting killSeed to it replays a failure.

const killRounds = 10

var killSeed = uint64(time.Now().UnixNano())

// runBin runs the built CLI to completion.
func runBin(t *testing.T, env []string, args ...string) (time.Duration, string) {
	t.Helper()
	cmd := exec.Command(cliBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	return time.Since(start), stderr.String()
}

// killAfter starts the CLI and SIGKILLs it after d (or lets it finish first).
func killAfter(t *testing.T, d time.Duration, env []string, args ...string) (finished bool) {
	t.Helper()
	cmd := exec.Command(cliBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err == nil
	case <-time.After(d):
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
	return false
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, the state follows the last ')'
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// entries lists dir's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, e := range ents {
		n = append(n, e.Name())
	}
	return n
}

// killModel is a checkpoint large enough (~50 MB) that a pack takes a few hundred ms.
func killModel(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "synthetic-llama")
	synthLlama(t, dir, 512, 1024, 4, 4096, 8, 4)
	return dir
}

func TestKillPack(t *testing.T) {
	if testing.Short() {
		t.Skip("kills 10 packs")
	}
	src := killModel(t)
	root := t.TempDir()
	clean := filepath.Join(root, "clean", "packed")
	took, _ := runBin(t, nil, "pack", src, "--out", clean)
	want := treeState(t, clean)
	rng := rand.New(rand.NewPCG(killSeed, 1))
	t.Logf("clean pack %s; kill seed %d", took, killSeed)
	out := filepath.Join(root, "work", "packed")
	for i := range killRounds {
		d := time.Duration(rng.Int64N(int64(took)))
		finished := killAfter(t, d, nil, "pack", src, "--out", out)
		runBin(t, nil, "pack", src, "--out", out)
		if diff := diffTrees(want, treeState(t, out)); diff != "" {
			t.Fatalf("round %d (killed after %s, finished %v): output differs from a clean run:\n%s", i, d, finished, diff)
		}
		if got := entries(t, filepath.Dir(out)); !slices.Equal(got, []string{"packed"}) {
			t.Fatalf("round %d (killed after %s): left beside the output: %v", i, d, got)
		}
	}
}

func TestKillPipeline(t *testing.T) {
	if testing.Short() {
		t.Skip("kills 10 pipeline runs")
	}
	src := killModel(t)
	root := t.TempDir()
	pids := filepath.Join(root, "driver.pids")
	env := func(sleep string) []string {
		return []string{fakePythonPIDs + "=" + pids, fakePythonSleep + "=" + sleep}
	}
	args := func(out string) []string {
		return []string{src, "--out", out, "--force", "--device", "cpu", "--python", fakePythonExe(t)}
	}
	clean := filepath.Join(root, "clean", "run")
	took, _ := runBin(t, env("300ms"), args(clean)...)
	want := treeState(t, clean)
	for _, p := range []string{".xpuinject-output", "packed/plan.yaml", "package/plan.yaml", "eval/eval.json", "eval/report.md", "eval/layers.png"} {
		if _, ok := want[filepath.FromSlash(p)]; !ok {
			t.Fatalf("a clean run wrote no %s", p)
		}
	}
	rng := rand.New(rand.NewPCG(killSeed, 2))
	t.Logf("clean pipeline run %s; kill seed %d", took, killSeed)
	out := filepath.Join(root, "work", "run")
	inEval := 0
	for i := range killRounds {
		os.Remove(pids)
		d := time.Duration(rng.Int64N(int64(took)))
		// a killed run's driver would run for a minute: if it survives the CLI, it shows
		killAfter(t, d, env("60s"), args(out)...)
		if b, err := os.ReadFile(pids); err == nil {
			inEval++
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				deadline := time.Now().Add(3 * time.Second)
				for alive(pid) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if alive(pid) {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("round %d (killed after %s): the eval driver (pid %d) outlived the CLI", i, d, pid)
				}
			}
		}
		runBin(t, env("10ms"), args(out)...)
		if diff := diffTrees(want, treeState(t, out)); diff != "" {
			t.Fatalf("round %d (killed after %s): output differs from a clean run:\n%s", i, d, diff)
		}
		if got := entries(t, filepath.Dir(out)); !slices.Equal(got, []string{"run"}) {
			t.Fatalf("round %d (killed after %s): left beside the output: %v", i, d, got)
		}
	}
	t.Logf("%d of %d kills landed while the eval driver ran", inEval, killRounds)
}

// TestInterruptPipeline: Ctrl-C during the eval stops the driver (its whole process
// group) and exits 130. The parts written before it stay, the earlier run's eval/ (which
// measured the replaced weights) is gone, nothing else is left; a run again restores all.
func TestInterruptPipeline(t *testing.T) {
	src := copyFixture(t, "llama-tiny", filepath.Join(t.TempDir(), "m"))
	root := t.TempDir()
	pids := filepath.Join(root, "driver.pids")
	out := filepath.Join(root, "run")
	args := []string{src, "--out", out, "--force", "--device", "cpu", "--python", fakePythonExe(t)}
	runBin(t, []string{fakePythonSleep + "=10ms"}, args...)
	before := treeState(t, root)

	cmd := exec.Command(cliBinary(t), args...)
	cmd.Env = append(os.Environ(), fakePythonPIDs+"="+pids, fakePythonSleep+"=60s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	for deadline := time.Now().Add(20 * time.Second); pid == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(pids); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	if pid == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the eval driver never started:\n%s", stderr.String())
	}
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != exitInterrupted {
		t.Errorf("exit %v, want %d:\n%s", err, exitInterrupted, stderr.String())
	}
	if alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the eval driver (pid %d) outlived the interrupted CLI", pid)
	}
	os.Remove(pids)
	want := map[string]string{}
	for k, v := range before {
		if k != "run/eval" && !strings.HasPrefix(k, "run/eval/") {
			want[k] = v
		}
	}
	if d := diffTrees(want, treeState(t, root)); d != "" {
		t.Errorf("after the interrupted run:\n%s", d)
	}
	runBin(t, []string{fakePythonSleep + "=10ms"}, args...)
	if d := diffTrees(before, treeState(t, root)); d != "" {
		t.Errorf("a run after the interrupted one differs from the first:\n%s", d)
	}
}
