package outdir

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A writer killed with SIGKILL at each step of Commit, then the cleanup the next run
// makes beside it (CleanStale, as Begin does): the output is never lost. It is the
// earlier output or the new one, whole and marked, and nothing is left beside it. The
// crash is a child process that kills itself at the step (the fault hook), not a timer.

const (
	crashDest = "OUTDIR_CRASH_DEST" // the output the child commits
	crashOp   = "OUTDIR_CRASH_OP"   // the fault-hook operation it dies at (exchange, rename, remove)
	crashPath = "OUTDIR_CRASH_PATH" // "dest": the operation on the output itself; "temp": on a temporary
	crashSwap = "OUTDIR_CRASH_SWAP" // "off": commit by two renames
)

// TestMain runs the crash child when the environment names one: it commits a new
// output over the earlier one and kills itself at the step named there.
func TestMain(m *testing.M) {
	dest := os.Getenv(crashDest)
	if dest == "" {
		os.Exit(m.Run())
	}
	noExchange = os.Getenv(crashSwap) == "off"
	SetFault(func(op, path string) error {
		onDest := path == dest
		if op == os.Getenv(crashOp) && onDest == (os.Getenv(crashPath) == "dest") && strings.Contains(path, filepath.Base(dest)) {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Minute)
		}
		return nil
	})
	tx, err := Begin(dest, opts(KindPacked, true))
	if err == nil {
		if err = tx.WriteFile("weights", []byte("new")); err == nil {
			err = tx.Commit()
		}
	}
	fmt.Fprintln(os.Stderr, "the crash child ran to the end:", err)
	os.Exit(3)
}

func TestCommitCrash(t *testing.T) {
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	os.Mkdir(a, 0o755)
	os.Mkdir(b, 0o755)
	if ok, err := exchangeDirs(a, b); !ok {
		t.Logf("no one-step swap in %s (%v): the swap cases take the two-rename path", filepath.Dir(a), err)
	}
	cases := []struct {
		name, op, path, swap string
		// want is the output's content after the cleanup; missingAtCrash allows the
		// output to be absent between the crash and the cleanup.
		want           string
		missingAtCrash bool
	}{
		{name: "swap: before it", op: "exchange", path: "dest", want: "old"},
		{name: "swap: after it, before the earlier output is removed", op: "remove", path: "temp", want: "new"},
		{name: "two renames: between them", op: "rename", path: "dest", swap: "off", want: "old", missingAtCrash: true},
		{name: "two renames: after them, before the earlier output is removed", op: "remove", path: "temp", swap: "off", want: "new"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			dest := filepath.Join(parent, "packed")
			if err := commit(t, dest, opts(KindPacked, false), map[string]string{"weights": "old"}); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), crashDest+"="+dest, crashOp+"="+c.op, crashPath+"="+c.path, crashSwap+"="+c.swap)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the child was not killed at the step (%v):\n%s", err, out)
			}
			if _, err := os.Lstat(dest); err != nil && !c.missingAtCrash {
				t.Errorf("right after the crash the output is missing: %v (beside it: %v)", err, names(t, parent))
			}
			CleanStale(parent) // what the next run in this folder does first
			if _, err := ReadMarker(dest); err != nil {
				t.Fatalf("after the cleanup the output is not there and marked: %v (beside it: %v)", err, names(t, parent))
			}
			if b, err := os.ReadFile(filepath.Join(dest, "weights")); err != nil || string(b) != c.want {
				t.Errorf("after the cleanup the output holds %q (%v), want the %s one", b, err, c.want)
			}
			if got := names(t, parent); !slices.Equal(got, []string{"packed"}) {
				t.Errorf("left beside the output: %v", got)
			}
		})
	}
}
