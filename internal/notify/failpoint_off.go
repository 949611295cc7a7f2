//go:build !failpoints

package notify

// failpoint marks a place where the fault-injection builds can kill the
// process. In normal builds it does nothing and compiles away.
func failpoint(string) {}
