//go:build !linux

package harness

import "syscall"

// sysProcAttr puts the child in its own process group. Outside Linux there is
// no parent-death signal: an interrupted run relies on Stop.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
