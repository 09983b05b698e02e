//go:build linux

package harness

import (
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// startChild prepares cmd so that its process never outlives ours: the kernel sends it
// SIGKILL when we die, kill -9 included (Pdeathsig), and a cancelled context kills its
// whole process group (workers it started too), not only the process. Call done after
// Wait returns.
func startChild(cmd *exec.Cmd) child {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	// Pdeathsig fires when the thread that forked exits, not the process: keep this
	// goroutine on its thread until the child has been waited for.
	runtime.LockOSThread()
	return child{}
}

type child struct{}

func (child) done() { runtime.UnlockOSThread() }
