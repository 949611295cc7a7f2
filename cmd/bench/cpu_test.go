package main

import (
	"os"
	"testing"
	"time"
)

func TestUseCountsBackendsStartedInTheWindow(t *testing.T) {
	before := cpuSample{procs: []time.Duration{time.Second, 2 * time.Second}, bench: time.Second,
		postgres: map[int]time.Duration{10: time.Second, 11: time.Second}, redis: time.Second}
	after := cpuSample{procs: []time.Duration{1500 * time.Millisecond, 2100 * time.Millisecond}, bench: 1200 * time.Millisecond,
		postgres: map[int]time.Duration{10: 1300 * time.Millisecond, 12: 200 * time.Millisecond}, redis: 1050 * time.Millisecond}
	u := after.since(before, 10*time.Second, 100)
	// Backend 11 exited (its time is lost), 12 started in the window.
	if u.postgres != 500*time.Millisecond {
		t.Errorf("postgres = %v, want 500ms (300ms of backend 10 and 200ms of the new backend 12)", u.postgres)
	}
	if got, want := u.all(), 500*time.Millisecond+100*time.Millisecond+200*time.Millisecond+50*time.Millisecond+500*time.Millisecond; got != want {
		t.Errorf("all = %v, want %v", got, want)
	}
	if got := u.perOrder(u.postgres); got != 5 {
		t.Errorf("PostgreSQL per order = %v ms, want 5", got)
	}
	if got := (cpuUse{}).perOrder(time.Second); got != 0 {
		t.Errorf("per order without orders = %v, want 0", got)
	}
}

func TestMachineBusyIncludesThisProcess(t *testing.T) {
	busy0, total0 := machineCPU()
	self0 := procUsage(os.Getpid()).CPU
	// Spin until /proc says this process used 200 ms of CPU, however
	// busy the machine is (up to a generous wall-clock limit).
	for deadline := time.Now().Add(20 * time.Second); procUsage(os.Getpid()).CPU-self0 < 200*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatal("20 s of spinning never showed 200 ms of CPU in /proc/self/stat: it is not read right")
		}
	}
	busy1, total1 := machineCPU()
	self := procUsage(os.Getpid()).CPU - self0
	busy, total := busy1-busy0, total1-total0
	// Ticks are 10 ms: allow two of rounding.
	if busy < self-20*time.Millisecond || busy > total {
		t.Errorf("machine busy %v over a window in which this process used %v (total %v): want self ≤ busy ≤ total", busy, self, total)
	}
}
