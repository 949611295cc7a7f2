package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuSample is the CPU time used so far by everything that serves an
// order: the pipeline's processes, the benchmark itself (load generator
// and SMTP sink, or the ceiling's client), every PostgreSQL process, and
// the pipeline's redis-server; and the machine's busy and total time.
type cpuSample struct {
	procs       []time.Duration // the deployment's, in order
	bench       time.Duration
	postgres    map[int]time.Duration // by pid: backends come and go
	redis       time.Duration
	busy, total time.Duration // all CPUs, from /proc/stat
}

// cpuUse is what a window used: the difference of two samples.
type cpuUse struct {
	procs                  []time.Duration
	bench, postgres, redis time.Duration
	busy, total            time.Duration
	window                 time.Duration
	orders                 float64 // orders served in the window
}

// sampleCPU samples dep's processes, or none for a nil dep (the ceiling).
func (b *bench) sampleCPU(dep *deployment) cpuSample {
	s := cpuSample{postgres: map[int]time.Duration{}, bench: procUsage(os.Getpid()).CPU}
	if dep != nil {
		for _, p := range dep.procs {
			s.procs = append(s.procs, procUsage(p.cmd.Process.Pid).CPU)
		}
		if dep.redisPid != 0 {
			s.redis = procUsage(dep.redisPid).CPU
		}
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		s.postgres[pid] = procUsage(pid).CPU
	}
	s.busy, s.total = machineCPU()
	return s
}

// since is the use between an earlier sample and this one, for orders
// served in a window of the given length.
func (s cpuSample) since(before cpuSample, window time.Duration, orders float64) cpuUse {
	u := cpuUse{bench: s.bench - before.bench, redis: s.redis - before.redis,
		busy: s.busy - before.busy, total: s.total - before.total, window: window, orders: orders}
	for i := range s.procs {
		u.procs = append(u.procs, s.procs[i]-before.procs[i])
	}
	for pid, t := range s.postgres {
		if b, ok := before.postgres[pid]; ok && b <= t {
			u.postgres += t - b
		} else {
			u.postgres += t // started in the window (or a reused pid): all of it is new
		}
	}
	return u
}

// perOrder is CPU time per order, in milliseconds.
func (u cpuUse) perOrder(t time.Duration) float64 {
	if u.orders == 0 {
		return 0
	}
	return float64(t.Microseconds()) / 1000 / u.orders
}

// own is the CPU time of PostgreSQL and the benchmark's process: all a
// ceiling measurement costs (no pipeline runs meanwhile).
func (u cpuUse) own() time.Duration { return u.postgres + u.bench }

// all is the CPU time of every component counted.
func (u cpuUse) all() time.Duration {
	t := u.bench + u.postgres + u.redis
	for _, p := range u.procs {
		t += p
	}
	return t
}

// machineCPU reads the busy and total time of all CPUs from /proc/stat.
// Busy is everything but idle and iowait; it includes steal, the time a
// virtual machine wanted a CPU its host gave to someone else.
func machineCPU() (busy, total time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	// user nice system idle iowait irq softirq steal, then guest and
	// guest_nice, which user and nice already include.
	for i, v := range f[1:min(len(f), 9)] {
		n, _ := strconv.ParseInt(v, 10, 64)
		d := time.Duration(n) * 10 * time.Millisecond
		total += d
		if i != 3 && i != 4 {
			busy += d
		}
	}
	return busy, total
}
