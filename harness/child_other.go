//go:build !linux

package harness

import (
	"os/exec"
	"syscall"
	"time"
)

// startChild puts cmd in its own process group, killed whole when the context is
// cancelled. (Only Linux can also tie the child's life to ours.)
func startChild(cmd *exec.Cmd) child {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return child{}
}

type child struct{}

func (child) done() {}
