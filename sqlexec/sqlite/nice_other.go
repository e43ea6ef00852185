//go:build !linux

package sqlite

// LowerThreadPriority does nothing where a single thread's priority cannot be
// set; the slow lane still bounds how many slow queries run at once.
func LowerThreadPriority() {}
