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

func (b *bench) report(low step, steps []step, best, half step, before, after ceilingResult, orders, emails, dups int) string {
	var r strings.Builder
	fmt.Fprintf(&r, "## Run of %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&r, "%d cores, %s; %d worker process(es), WORKER_CONCURRENCY=%d; each rate held %v after VACUUM and CHECKPOINT; sustainable = no errors, API p99 ≤ %v, achieved ≥ 95%% of offered, and the backlog drained within 0.5 s of the load stopping (it did not grow).\n\n",
		runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH, b.o.workers, b.o.concurrency, b.o.step, b.o.p99Bound)
	fmt.Fprintf(&r, "| offered/s | achieved/s | API p50 | p95 | p99 | max | errors | checkout→sent p50 | p99 | drain | machine busy | sustainable |\n")
	fmt.Fprintf(&r, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |\n")
	row := func(label string, s step) {
		ok := "yes"
		if !s.Sustainable {
			ok = "no"
		}
		fmt.Fprintf(&r, "| %s | %.0f | %s | %s | %s | %s | %d | %s | %s | %s | %s | %s |\n", label, s.Achieved,
			ms(s.P50), ms(s.P95), ms(s.P99), ms(s.Max), s.Errors, ms(s.SentP50), ms(s.SentP99), ms(s.Drain), busy(s.cpu), ok)
	}
	row(fmt.Sprintf("%.0f (low load)", low.Offered), low)
	for _, s := range steps {
		row(fmt.Sprintf("%.0f", s.Offered), s)
	}
	row(fmt.Sprintf("%.0f (half max)", half.Offered), half)

	ceiling := (before.rate + after.rate) / 2
	fmt.Fprintf(&r, "\n| result | value | target |\n| --- | ---: | --- |\n")
	fmt.Fprintf(&r, "| maximum sustainable rate | %.0f checkouts/s | |\n", best.Offered)
	fmt.Fprintf(&r, "| PostgreSQL ceiling (same SQL, %d in flight): before the service, after it | %.0f, %.0f orders/s | |\n", b.o.concurrency, before.rate, after.rate)
	fmt.Fprintf(&r, "| service / ceiling (mean of the two) | %.0f%% | ≥ 60%% |\n", 100*best.Offered/ceiling)
	fmt.Fprintf(&r, "| API p99 at half the maximum | %s | < 25 ms |\n", ms(half.P99))
	fmt.Fprintf(&r, "| checkout→sent p50 at low load | %s | < 50 ms |\n", ms(low.SentP50))
	fmt.Fprintf(&r, "| e-mails at the sink / orders | %d / %d | equal |\n", emails, orders)
	fmt.Fprintf(&r, "| duplicates (Message-ID seen twice) | %d | 0 |\n", dups)

	// Where the CPU goes, per order: the service at its maximum rate
	// against the ceiling.
	fmt.Fprintf(&r, "\n| CPU per order (ms) | service at %.0f/s | ceiling (after) at %.0f/s |\n| --- | ---: | ---: |\n", best.Offered, after.rate)
	c, sv := after.cpu, best.cpu
	fmt.Fprintf(&r, "| PostgreSQL (all its processes) | %.2f | %.2f |\n", sv.perOrder(sv.postgres), c.perOrder(c.postgres))
	fmt.Fprintf(&r, "| Redis | %.2f | — |\n", sv.perOrder(sv.redis))
	for i, p := range b.procs {
		if i < len(sv.procs) {
			fmt.Fprintf(&r, "| %s | %.2f | — |\n", p.name, sv.perOrder(sv.procs[i]))
		}
	}
	fmt.Fprintf(&r, "| load generator and SMTP sink / the ceiling's client | %.2f | %.2f |\n", sv.perOrder(sv.bench), c.perOrder(c.bench))
	fmt.Fprintf(&r, "| **all of the above** | **%.2f** | **%.2f** |\n", sv.perOrder(sv.all()), c.perOrder(c.all()))
	fmt.Fprintf(&r, "| machine busy | %s | %s |\n", busy(sv), busy(c))
	if all := sv.perOrder(sv.all()); all > 0 {
		fmt.Fprintf(&r, "\nWhen both are bound by the same CPUs, service/ceiling cannot exceed the ratio of their CPU per order: %.2f / %.2f = %.0f%%.\n",
			c.perOrder(c.all()), all, 100*c.perOrder(c.all())/all)
	}

	fmt.Fprintf(&r, "\n| process | peak RSS | CPU at the maximum rate | target |\n| --- | ---: | ---: | --- |\n")
	for i, p := range b.procs {
		u := procUsage(p.cmd.Process.Pid)
		cpu := 0.0
		if i < len(sv.procs) && sv.window > 0 {
			cpu = 100 * sv.procs[i].Seconds() / sv.window.Seconds()
		}
		fmt.Fprintf(&r, "| %s | %.1f MiB | %.0f%% of a core | RSS < 64 MiB |\n", p.name, float64(u.PeakRSSKiB)/1024, cpu)
	}
	if sv.window > 0 {
		self := procUsage(os.Getpid())
		fmt.Fprintf(&r, "| bench (load generator and SMTP sink, not the service) | %.1f MiB | %.0f%% of a core | |\n",
			float64(self.PeakRSSKiB)/1024, 100*sv.bench.Seconds()/sv.window.Seconds())
	}
	return r.String()
}

// busy is the share of all CPUs' time the machine was busy.
func busy(u cpuUse) string {
	if u.total <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(u.busy)/float64(u.total))
}
