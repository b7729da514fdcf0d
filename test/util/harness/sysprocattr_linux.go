package harness

import "syscall"

// sysProcAttr puts the child in its own process group and has the kernel kill
// it when the test binary dies, so no control plane outlives an interrupted run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
