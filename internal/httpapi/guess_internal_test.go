package httpapi

import (
	"testing"
	"time"
)

// A name's first ten failures cost nothing; then each waits twice as
// long as the one before, from 90 s up to an hour; a quiet hour past the
// wait starts afresh. Names are counted apart.
func TestBackoffDoubles(t *testing.T) {
	t.Parallel()
	b := newBackoff(operatorBackoff)
	now := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	for i := range 10 {
		if w := b.wait("a", now); w != 0 {
			t.Fatalf("before failure %d: wait %s", i+1, w)
		}
		b.fail("a", now)
	}
	for _, want := range []time.Duration{90 * time.Second, 3 * time.Minute, 6 * time.Minute, 12 * time.Minute, 24 * time.Minute, 48 * time.Minute, time.Hour, time.Hour} {
		if w := b.wait("a", now); w != want {
			t.Fatalf("wait %s, want %s", w, want)
		}
		if w := b.wait("b", now); w != 0 {
			t.Fatalf("another name waits %s", w)
		}
		now = now.Add(want)
		b.fail("a", now)
	}
	now = now.Add(time.Hour + time.Hour) // the wait, then a quiet hour
	b.fail("a", now)
	if w := b.wait("a", now); w != 0 {
		t.Errorf("after a quiet hour: wait %s, want a fresh start", w)
	}
}

// Guessing is no faster than the refusal budget it replaced (10, then one
// every 90 s per address): over a day, neither a guesser who tries the
// moment it may nor one who waits to start afresh gets more tries.
func TestBackoffIsNoFasterThanTheOldBudget(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	old := newLimiter(RateLimit{PerSecond: 1.0 / 90, Burst: 10})
	before := 0
	for at := start; at.Before(start.Add(day)); at = at.Add(time.Second) {
		if empty, _ := old.empty("x", at); !empty {
			old.spend("x", at)
			before++
		}
	}
	for name, patient := range map[string]bool{"at once": false, "afresh": true} {
		b := newBackoff(operatorBackoff)
		tries := 0
		for at := start; at.Before(start.Add(day)); at = at.Add(time.Second) {
			if b.wait("x", at) > 0 {
				continue
			}
			if s := b.names["x"]; patient && s != nil && s.failures >= b.free && !b.forgiven(s, at) {
				continue
			}
			b.fail("x", at)
			tries++
		}
		if tries > before {
			t.Errorf("a guesser %s: %d tries a day, more than the %d of before", name, tries, before)
		}
		t.Logf("a guesser %s: %d tries a day (before: %d)", name, tries, before)
	}
}
