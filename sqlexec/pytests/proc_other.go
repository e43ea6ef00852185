//go:build !unix

package pytests

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup kills the worker (there are no process groups to signal).
func signalGroup(p *os.Process, _ bool) { p.Kill() }
