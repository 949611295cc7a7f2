//go:build !failpoints

// Package failpoint marks the places where the fault-injection builds
// (-tags failpoints) can kill or freeze the process. In normal builds,
// the ones that ship, Inject does nothing and compiles away.
package failpoint

// Inject is a no-op outside -tags failpoints builds.
func Inject(string) {}

// Value is "" outside -tags failpoints builds.
func Value(string) string { return "" }
