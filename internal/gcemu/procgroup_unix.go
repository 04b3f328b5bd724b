//go:build unix

package gcemu

import (
	"os/exec"
	"syscall"
)

// ownGroup makes the launcher the leader of a new process group, so that the
// Java server it execs (and anything it forks) can be killed as one, even if
// the launcher script were to stay alive as a parent.
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
