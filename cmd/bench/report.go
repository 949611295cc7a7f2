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

// report is the Markdown report of the run: each pipeline's steps, then
// the pipelines side by side (with sekali / River when both ran) and the
// PostgreSQL ceiling as context.
func (b *bench) report(outs []outcome, before, after ceilingResult) string {
	var r strings.Builder
	fmt.Fprintf(&r, "## Run of %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	settled := "after VACUUM and CHECKPOINT"
	if b.unsettled {
		settled = "(VACUUM or CHECKPOINT refused: steps may meet checkpoints and dead rows)"
	}
	if b.o.profileDir != "" {
		settled += ", CPU-profiled (profiling costs CPU: do not compare the CPU figures with unprofiled runs)"
	}
	var setups []string
	for _, o := range outs {
		setups = append(setups, b.setup(o.pipeline))
	}
	fmt.Fprintf(&r, "%d cores, %s; %s; each rate held %v %s; sustainable = no errors, API p99 ≤ %v, achieved ≥ 95%% of offered, and the backlog drained within 0.5 s of the load stopping (it did not grow).\n",
		runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH, strings.Join(setups, "; "), b.o.step, settled, b.o.p99Bound)
	for _, o := range outs {
		fmt.Fprintf(&r, "\n### %s\n\n", o.pipeline.name)
		stepsTable(&r, o)
	}
	compared := len(outs) == 2
	ratio := func(x, y float64) string {
		if !compared || y == 0 {
			return ""
		}
		return fmt.Sprintf(" %.2f |", x/y)
	}
	header := func(first string, cols []string, extra ...string) {
		fmt.Fprintf(&r, "| %s |", first)
		for _, c := range cols {
			fmt.Fprintf(&r, " %s |", c)
		}
		if compared {
			fmt.Fprintf(&r, " %s / %s |", outs[0].pipeline.name, outs[1].pipeline.name)
		}
		for _, e := range extra {
			fmt.Fprintf(&r, " %s |", e)
		}
		fmt.Fprintf(&r, "\n| --- |%s\n", strings.Repeat(" ---: |", len(cols)+len(extra)+btoi(compared)))
	}
	names := make([]string, len(outs))
	for i, o := range outs {
		names[i] = o.pipeline.name
	}

	ceiling := (before.rate + after.rate) / 2
	fmt.Fprintf(&r, "\n### Side by side\n\nPostgreSQL ceiling (sekali's SQL, %d in flight, no pipeline running): %.0f orders/s before the pipelines ran, %.0f after.\n\n",
		b.o.concurrency, before.rate, after.rate)
	target := func(t string) string {
		if len(outs) > 0 && outs[0].pipeline.targets {
			return " " + t + " |"
		}
		return ""
	}
	if len(outs) > 0 && outs[0].pipeline.targets {
		header("result", names, "target ("+outs[0].pipeline.name+")")
	} else {
		header("result", names)
	}
	row := func(label string, cell func(o outcome) string, x func(o outcome) float64, t string) {
		fmt.Fprintf(&r, "| %s |", label)
		for _, o := range outs {
			fmt.Fprintf(&r, " %s |", cell(o))
		}
		if compared {
			if x == nil {
				r.WriteString(" |")
			} else {
				r.WriteString(ratio(x(outs[0]), x(outs[1])))
			}
		}
		r.WriteString(target(t) + "\n")
	}
	row("maximum sustainable rate", func(o outcome) string {
		if o.capped {
			return fmt.Sprintf("≥ %.0f checkouts/s (every rate tried)", o.best.Offered)
		}
		return fmt.Sprintf("%.0f checkouts/s", o.best.Offered)
	},
		func(o outcome) float64 { return o.best.Offered }, "")
	if outs[0].closed.Clients > 0 {
		row(fmt.Sprintf("closed loop, %d clients: rate", outs[0].closed.Clients), func(o outcome) string {
			return fmt.Sprintf("%.0f checkouts/s", o.closed.Achieved)
		}, func(o outcome) float64 { return o.closed.Achieved }, "")
		row("closed loop: API p50, p99", func(o outcome) string { return ms(o.closed.P50) + ", " + ms(o.closed.P99) }, nil, "")
		row("closed loop: CPU per order", func(o outcome) string {
			return fmt.Sprintf("%.2f ms", o.closed.cpu.perOrder(o.closed.cpu.all()))
		}, func(o outcome) float64 { return o.closed.cpu.perOrder(o.closed.cpu.all()) }, "")
	}
	row("pipeline / ceiling (mean of the two)", func(o outcome) string { return fmt.Sprintf("%.0f%%", 100*o.best.Offered/ceiling) }, nil, "≥ 60%")
	row("API p99 at half the maximum", func(o outcome) string { return ms(o.half.P99) }, func(o outcome) float64 { return msf(o.half.P99) }, "< 25 ms")
	row("checkout→sent p50 at low load", func(o outcome) string { return ms(o.low.SentP50) }, func(o outcome) float64 { return msf(o.low.SentP50) }, "< 50 ms")
	row("e-mails at the sink / orders", func(o outcome) string { return fmt.Sprintf("%d / %d", o.emails, o.orders) }, nil, "equal")
	row("duplicates (Message-ID seen twice)", func(o outcome) string { return strconv.Itoa(o.dups) }, nil, "0")
	row("WAL per order at the maximum rate", func(o outcome) string { return fmt.Sprintf("%.0f B", o.best.walPerOrder) },
		func(o outcome) float64 { return o.best.walPerOrder }, "")
	row("row versions per order (updates of its row), HOT share", func(o outcome) string {
		return fmt.Sprintf("%.2f, %.0f%% HOT", o.best.updatesPerOrder, 100*o.best.hotShare)
	}, func(o outcome) float64 { return o.best.updatesPerOrder }, "")
	row("PostgreSQL commits per order at the maximum rate", func(o outcome) string { return fmt.Sprintf("%.2f", o.best.commitsPerOrder) },
		func(o outcome) float64 { return o.best.commitsPerOrder }, "")
	row("Redis commands per order (of which scripts) at the maximum rate", func(o outcome) string {
		if !o.redis {
			return "no Redis"
		}
		return fmt.Sprintf("%.1f (%.1f)", o.best.redisPerOrder, o.best.scriptsPerOrder)
	}, nil, "")
	row("Redis used_memory per 1,000 orders, at the end", func(o outcome) string {
		if !o.redis {
			return "no Redis"
		}
		return fmt.Sprintf("%.0f KiB", o.redisPerK/1024)
	}, nil, "")

	// Where the CPU goes, per order: each pipeline at its maximum rate,
	// and the ceiling (after), which has no pipeline processes.
	cols := make([]string, len(outs))
	for i, o := range outs {
		cols[i] = fmt.Sprintf("%s at %.0f/s", o.pipeline.name, o.best.Offered)
	}
	fmt.Fprintln(&r)
	header("CPU per order (ms)", cols, fmt.Sprintf("ceiling (after) at %.0f/s", after.rate))
	c := after.cpu
	// A row per component that some pipeline has, in bold for the total.
	cpuRow := func(label string, of func(o outcome) (float64, bool), ceil string) {
		vals, cells, some := make([]float64, len(outs)), make([]string, len(outs)), false
		for i, o := range outs {
			v, ok := of(o)
			vals[i], cells[i] = v, "—"
			if ok {
				cells[i], some = fmt.Sprintf("%.2f", v), true
				if strings.HasPrefix(label, "**") {
					cells[i] = "**" + cells[i] + "**"
				}
			}
		}
		if !some {
			return
		}
		fmt.Fprintf(&r, "| %s |", label)
		for _, c := range cells {
			fmt.Fprintf(&r, " %s |", c)
		}
		if compared {
			if vals[1] > 0 {
				r.WriteString(ratio(vals[0], vals[1]))
			} else {
				r.WriteString(" |")
			}
		}
		fmt.Fprintf(&r, " %s |\n", ceil)
	}
	cpuRow("PostgreSQL (all its processes on this machine)", func(o outcome) (float64, bool) { return o.best.cpu.perOrder(o.best.cpu.postgres), true },
		fmt.Sprintf("%.2f", c.perOrder(c.postgres)))
	for _, role := range []string{"api", "worker", "reconciler"} {
		cpuRow(roleLabel[role], func(o outcome) (float64, bool) { t, ok := o.roleCPU(role); return o.best.cpu.perOrder(t), ok }, "—")
	}
	cpuRow("Redis", func(o outcome) (float64, bool) { return o.best.cpu.perOrder(o.best.cpu.redis), o.redis }, "—")
	cpuRow("load generator and SMTP sink / the ceiling's client", func(o outcome) (float64, bool) { return o.best.cpu.perOrder(o.best.cpu.bench), true },
		fmt.Sprintf("%.2f", c.perOrder(c.bench)))
	cpuRow("**the order's cost**: everything for a pipeline, PostgreSQL and client for the ceiling", func(o outcome) (float64, bool) { return o.best.cpu.perOrder(o.best.cpu.all()), true },
		fmt.Sprintf("**%.2f**", c.perOrder(c.own())))
	fmt.Fprintf(&r, "| machine busy |")
	for _, o := range outs {
		fmt.Fprintf(&r, " %s |", busy(o.best.cpu))
	}
	if compared {
		r.WriteString(" |")
	}
	fmt.Fprintf(&r, " %s |\n", busy(c))
	if b.noLocalPostgres {
		fmt.Fprintf(&r, "\nNo PostgreSQL process runs on this machine: its CPU is not in the table, and the comparison below is meaningless.\n")
	}
	ceilCPU := (before.cpu.perOrder(before.cpu.own()) + c.perOrder(c.own())) / 2
	var inverted []string
	for _, o := range outs {
		if cost := o.best.cpu.perOrder(o.best.cpu.all()); cost > 0 {
			inverted = append(inverted, fmt.Sprintf("%s %.2f / %.2f ms = %.0f%%", o.pipeline.name, ceilCPU, cost, 100*ceilCPU/cost))
		}
	}
	if len(inverted) > 0 {
		fmt.Fprintf(&r, "\nIf a pipeline and the ceiling were bound by the same CPUs, used equally, pipeline/ceiling would be their CPU per order inverted (the mean of the two ceilings): %s.\n",
			strings.Join(inverted, "; "))
	}
	if compared {
		x, y := outs[0], outs[1]
		fmt.Fprintf(&r, "\n%s sustained %.2f× the rate of %s (%.0f against %.0f checkouts/s), spending %.2f× its CPU per order (%.2f against %.2f ms).\n",
			x.pipeline.name, x.best.Offered/y.best.Offered, y.pipeline.name, x.best.Offered, y.best.Offered,
			x.best.cpu.perOrder(x.best.cpu.all())/y.best.cpu.perOrder(y.best.cpu.all()), x.best.cpu.perOrder(x.best.cpu.all()), y.best.cpu.perOrder(y.best.cpu.all()))
	}

	fmt.Fprintf(&r, "\n| process | peak RSS | CPU at its pipeline's maximum rate | target |\n| --- | ---: | ---: | --- |\n")
	var benchCPU []string
	for _, o := range outs {
		sv := o.best.cpu
		for i, p := range o.procs {
			cpu := 0.0
			if i < len(sv.procs) && sv.window > 0 {
				cpu = 100 * sv.procs[i].Seconds() / sv.window.Seconds()
			}
			fmt.Fprintf(&r, "| %s: %s | %.1f MiB | %.0f%% of a core | RSS < 64 MiB |\n", o.pipeline.name, p.name, float64(p.peakRSSKiB)/1024, cpu)
		}
		if sv.window > 0 {
			benchCPU = append(benchCPU, fmt.Sprintf("%.0f%% (%s)", 100*sv.bench.Seconds()/sv.window.Seconds(), o.pipeline.name))
		}
	}
	self := procUsage(os.Getpid())
	fmt.Fprintf(&r, "| bench (load generator and SMTP sinks, not a pipeline) | %.1f MiB | %s of a core | |\n",
		float64(self.PeakRSSKiB)/1024, strings.Join(benchCPU, ", "))
	return r.String()
}

// setup says how a pipeline was run.
func (b *bench) setup(p pipeline) string {
	if p.name == riverReference.name {
		return fmt.Sprintf("%s: %d worker process(es), MaxWorkers=%d, FetchCooldown=%v, FetchPollInterval=%v",
			p.name, b.o.workers, b.riverMaxWorkers(), b.o.riverFetchCooldown, b.o.riverFetchPoll)
	}
	return fmt.Sprintf("%s: %d worker process(es), WORKER_CONCURRENCY=%d", p.name, b.o.workers, b.o.concurrency)
}

// stepsTable is one row per rate a pipeline was offered.
func stepsTable(r *strings.Builder, o outcome) {
	fmt.Fprintf(r, "| offered/s | achieved/s | API p50 | p95 | p99 | max | errors | checkout→sent p50 | p99 | drain | machine busy | sustainable |\n")
	fmt.Fprintf(r, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |\n")
	row := func(label string, s step) {
		ok := "yes"
		if !s.Sustainable {
			ok = "no"
		}
		fmt.Fprintf(r, "| %s | %.0f | %s | %s | %s | %s | %d | %s | %s | %s | %s | %s |\n", label, s.Achieved,
			ms(s.P50), ms(s.P95), ms(s.P99), ms(s.Max), s.Errors, ms(s.SentP50), ms(s.SentP99), ms(s.Drain), busy(s.cpu), ok)
	}
	row(fmt.Sprintf("%.0f (low load)", o.low.Offered), o.low)
	for _, s := range o.steps {
		row(fmt.Sprintf("%.0f", s.Offered), s)
	}
	row(fmt.Sprintf("%.0f (half max)", o.half.Offered), o.half)
	if o.closed.Clients > 0 {
		row(fmt.Sprintf("closed loop, %d clients", o.closed.Clients), o.closed)
	}
}

// roleLabel names the rows in which processes are compared across
// pipelines.
var roleLabel = map[string]string{"api": "API process", "worker": "worker process(es)", "reconciler": "reconciler"}

// roleCPU is the CPU its processes of one role used at the maximum rate;
// ok is false when the pipeline has none.
func (o outcome) roleCPU(role string) (t time.Duration, ok bool) {
	for i, p := range o.procs {
		if p.role == role && i < len(o.best.cpu.procs) {
			t += o.best.cpu.procs[i]
			ok = true
		}
	}
	return t, ok
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

// busy is the share of all CPUs' time the machine was busy.
func busy(u cpuUse) string {
	if u.total <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(u.busy)/float64(u.total))
}
