//go:build unix

package pytests

import (
	"os"
	"syscall"
)

// sysProcAttr puts a worker in a process group of its own (so that a kill
// reaches what its tests started, and a terminal's ^C does not reach it).
func sysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	parentDeathSignal(a)
	return a
}

// signalGroup sends SIGTERM (or SIGKILL) to the worker's process group.
func signalGroup(p *os.Process, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		p.Signal(sig)
	}
}
