package sqlite

import "syscall"

// LowerThreadPriority gives the calling OS thread the lowest CPU priority
// (nice 19). It is meant for sqlexec.LaneOptions.SlowThread: slow-lane queries
// then run on the CPU that quick queries leave, and their own time limit,
// measured on their thread's CPU clock, is not shortened by waiting. Raising
// a thread's niceness needs no privilege; the thread is never given back to
// other work (the lane's workers keep their threads locked until they exit).
func LowerThreadPriority() {
	// On Linux, PRIO_PROCESS with a thread id applies to that thread only.
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), 19)
}
