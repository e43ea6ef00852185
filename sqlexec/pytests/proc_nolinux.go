//go:build unix && !linux

package pytests

import "syscall"

// parentDeathSignal does nothing where the kernel has no such signal: a
// worker whose server died exits at the end of its input.
func parentDeathSignal(*syscall.SysProcAttr) {}
