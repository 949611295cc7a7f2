package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// usage is one process's resource use: peak resident memory (VmHWM) and
// CPU seconds so far, from /proc.
type usage struct {
	PeakRSSKiB int
	CPU        time.Duration
}

func procUsage(pid int) usage {
	var u usage
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				f := strings.Fields(line)
				u.PeakRSSKiB, _ = strconv.Atoi(f[1])
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		// utime and stime are fields 14 and 15 of stat, 12 and 13 here; in
		// clock ticks, which are 100 a second on Linux.
		ut, _ := strconv.Atoi(f[11])
		st, _ := strconv.Atoi(f[12])
		u.CPU = time.Duration(ut+st) * 10 * time.Millisecond
	}
	return u
}

// cpuSnapshot reads every process's CPU time, and last the benchmark's
// own (load generator and SMTP sink).
func (b *bench) cpuSnapshot() []time.Duration {
	out := make([]time.Duration, len(b.procs)+1)
	for i, p := range b.procs {
		out[i] = procUsage(p.cmd.Process.Pid).CPU
	}
	out[len(b.procs)] = procUsage(os.Getpid()).CPU
	return out
}

func (b *bench) report(low step, steps []step, best, half step, ceiling float64, orders, emails, dups int) string {
	var r strings.Builder
	fmt.Fprintf(&r, "## Run of %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&r, "%d cores, %s; %d worker process(es), WORKER_CONCURRENCY=%d; each rate held %v; sustainable = no errors, API p99 ≤ %v, achieved ≥ 95%% of offered, and the backlog drained within 0.5 s of the load stopping (it did not grow).\n\n",
		runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH, b.o.workers, b.o.concurrency, b.o.step, b.o.p99Bound)
	fmt.Fprintf(&r, "| offered/s | achieved/s | API p50 | p95 | p99 | max | errors | checkout→sent p50 | p99 | drain | sustainable |\n")
	fmt.Fprintf(&r, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |\n")
	row := func(label string, s step) {
		ok := "yes"
		if !s.Sustainable {
			ok = "no"
		}
		fmt.Fprintf(&r, "| %s | %.0f | %s | %s | %s | %s | %d | %s | %s | %s | %s |\n", label, s.Achieved,
			ms(s.P50), ms(s.P95), ms(s.P99), ms(s.Max), s.Errors, ms(s.SentP50), ms(s.SentP99), ms(s.Drain), ok)
	}
	row(fmt.Sprintf("%.0f (low load)", low.Offered), low)
	for _, s := range steps {
		row(fmt.Sprintf("%.0f", s.Offered), s)
	}
	row(fmt.Sprintf("%.0f (half max)", half.Offered), half)

	fmt.Fprintf(&r, "\n| result | value | target |\n| --- | ---: | --- |\n")
	fmt.Fprintf(&r, "| maximum sustainable rate | %.0f checkouts/s | |\n", best.Offered)
	fmt.Fprintf(&r, "| PostgreSQL ceiling (same SQL, %d in flight) | %.0f orders/s | |\n", b.o.concurrency, ceiling)
	fmt.Fprintf(&r, "| service / ceiling | %.0f%% | ≥ 60%% |\n", 100*best.Offered/ceiling)
	fmt.Fprintf(&r, "| API p99 at half the maximum | %s | < 25 ms |\n", ms(half.P99))
	fmt.Fprintf(&r, "| checkout→sent p50 at low load | %s | < 50 ms |\n", ms(low.SentP50))
	fmt.Fprintf(&r, "| e-mails at the sink / orders | %d / %d | equal |\n", emails, orders)
	fmt.Fprintf(&r, "| duplicates (Message-ID seen twice) | %d | 0 |\n", dups)

	fmt.Fprintf(&r, "\n| process | peak RSS | CPU at the maximum rate | target |\n| --- | ---: | ---: | --- |\n")
	for i, p := range b.procs {
		u := procUsage(p.cmd.Process.Pid)
		cpu := 0.0
		if best.cpu != nil && i < len(best.cpu) {
			cpu = 100 * best.cpu[i].Seconds() / b.o.step.Seconds()
		}
		fmt.Fprintf(&r, "| %s | %.1f MiB | %.0f%% of a core | RSS < 64 MiB |\n", p.name, float64(u.PeakRSSKiB)/1024, cpu)
	}
	if n := len(b.procs); best.cpu != nil && n < len(best.cpu) {
		self := procUsage(os.Getpid())
		fmt.Fprintf(&r, "| bench (load generator and SMTP sink, not the service) | %.1f MiB | %.0f%% of a core | |\n",
			float64(self.PeakRSSKiB)/1024, 100*best.cpu[n].Seconds()/b.o.step.Seconds())
	}
	return r.String()
}
