//go:build failpoints

package failpoint

import (
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// armed holds the failpoints named in SEKALI_FAILPOINTS, a comma-separated
// list of name=action where action is kill (SIGKILL, as a crash) or stop
// (SIGSTOP, as a long GC pause or a frozen VM; SIGCONT resumes it). Only
// binaries built with -tags failpoints read it; see docs/reliability.md.
var armed = func() map[string]string {
	m := map[string]string{}
	for _, item := range strings.Split(os.Getenv("SEKALI_FAILPOINTS"), ",") {
		name, action, _ := strings.Cut(strings.TrimSpace(item), "=")
		if name != "" {
			m[name] = action
		}
	}
	return m
}()

// Inject kills or stops the process if SEKALI_FAILPOINTS arms name.
func Inject(name string) {
	switch armed[name] {
	case "kill":
		os.Stderr.WriteString("failpoint " + name + ": killing the process\n")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is not delivered synchronously; never return
	case "stop":
		// kill(2) returns before the stop takes hold of every thread; wait
		// for the SIGCONT that ends it, so this goroutine cannot slip past
		// the failpoint in the meantime.
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		defer signal.Stop(cont)
		os.Stderr.WriteString("failpoint " + name + ": stopping the process\n")
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		<-cont
	}
}

// Value returns what SEKALI_FAILPOINTS sets name to, for failpoints that
// change a setting rather than kill or stop (e.g.
// without-templates=order-shipped: a worker as an older build that lacks
// that template).
func Value(name string) string { return armed[name] }
