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
	settled := "after VACUUM and CHECKPOINT"
	if b.unsettled {
		settled = "(VACUUM or CHECKPOINT refused: steps may meet checkpoints and dead rows)"
	}
	if b.o.profileDir != "" {
		settled += ", CPU-profiled (profiling costs CPU: do not compare the CPU figures with unprofiled runs)"
	}
	fmt.Fprintf(&r, "%d cores, %s; %d worker process(es), WORKER_CONCURRENCY=%d; each rate held %v %s; sustainable = no errors, API p99 ≤ %v, achieved ≥ 95%% of offered, and the backlog drained within 0.5 s of the load stopping (it did not grow).\n\n",
		runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH, b.o.workers, b.o.concurrency, b.o.step, settled, b.o.p99Bound)
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
	fmt.Fprintf(&r, "| PostgreSQL ceiling (same SQL, %d in flight): before the load, after it | %.0f, %.0f orders/s | |\n", b.o.concurrency, before.rate, after.rate)
	fmt.Fprintf(&r, "| service / ceiling (mean of the two) | %.0f%% | ≥ 60%% |\n", 100*best.Offered/ceiling)
	fmt.Fprintf(&r, "| API p99 at half the maximum | %s | < 25 ms |\n", ms(half.P99))
	fmt.Fprintf(&r, "| checkout→sent p50 at low load | %s | < 50 ms |\n", ms(low.SentP50))
	fmt.Fprintf(&r, "| e-mails at the sink / orders | %d / %d | equal |\n", emails, orders)
	fmt.Fprintf(&r, "| duplicates (Message-ID seen twice) | %d | 0 |\n", dups)

	// Where the CPU goes, per order: the service at its maximum rate
	// against the ceiling (after), whose column also shows what the idle
	// service processes used meanwhile.
	fmt.Fprintf(&r, "\n| CPU per order (ms) | service at %.0f/s | ceiling (after) at %.0f/s |\n| --- | ---: | ---: |\n", best.Offered, after.rate)
	c, sv := after.cpu, best.cpu
	fmt.Fprintf(&r, "| PostgreSQL (all its processes on this machine) | %.2f | %.2f |\n", sv.perOrder(sv.postgres), c.perOrder(c.postgres))
	fmt.Fprintf(&r, "| load generator and SMTP sink / the ceiling's client | %.2f | %.2f |\n", sv.perOrder(sv.bench), c.perOrder(c.bench))
	fmt.Fprintf(&r, "| Redis | %.2f | %.2f (idle) |\n", sv.perOrder(sv.redis), c.perOrder(c.redis))
	for i, p := range b.procs {
		if i < len(sv.procs) && i < len(c.procs) {
			fmt.Fprintf(&r, "| %s | %.2f | %.2f (idle) |\n", p.name, sv.perOrder(sv.procs[i]), c.perOrder(c.procs[i]))
		}
	}
	fmt.Fprintf(&r, "| **the order's cost**: everything for the service, PostgreSQL and client for the ceiling | **%.2f** | **%.2f** |\n", sv.perOrder(sv.all()), c.perOrder(c.own()))
	fmt.Fprintf(&r, "| machine busy | %s | %s |\n", busy(sv), busy(c))
	if b.noLocalPostgres {
		fmt.Fprintf(&r, "\nNo PostgreSQL process runs on this machine: its CPU is not in the table, and the comparison below is meaningless.\n")
	}
	if svc := sv.perOrder(sv.all()); svc > 0 {
		ceil := (before.cpu.perOrder(before.cpu.own()) + c.perOrder(c.own())) / 2
		fmt.Fprintf(&r, "\nIf both were bound by the same CPUs, used equally, service/ceiling would be their CPU per order inverted: %.2f ms (mean of the two ceilings) / %.2f ms = %.0f%%.\n",
			ceil, svc, 100*ceil/svc)
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
