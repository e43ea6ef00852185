package pytests

import "syscall"

// parentDeathSignal makes the kernel kill a worker whose server died.
func parentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
