package quota

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The caps count per recipient, per domain and in all, in one Redis that
// two replicas share, refuse once one is reached without counting the
// refused one against the others, and start afresh on the hour.
func TestHourlyCapsAreSharedAndReset(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	rdb := redisconn.NewClient(rd.Opt)
	t.Cleanup(func() { rdb.Close() })
	limits := Limits{PerRecipient: 2, PerDomain: 3, All: 4}
	clock := time.Date(2026, 12, 1, 13, 40, 0, 0, time.UTC)
	regA := prometheus.NewRegistry()
	replica := func(reg *prometheus.Registry) *Hourly {
		h := NewHourly(rdb, limits, rd.Queue, reg)
		h.now = func() time.Time { return clock }
		return h
	}
	a, b := replica(regA), replica(prometheus.NewRegistry()) // two API processes
	ctx := context.Background()
	for i, step := range []struct {
		h         *Hourly
		recipient string
		refused   string
	}{
		{a, "ana@toko.example", ""},
		{b, "ana@toko.example", ""},
		{a, "ana@toko.example", "recipient"},
		{b, "budi@toko.example", ""},
		{a, "citra@toko.example", "domain"},
		{b, "dewi@other.example", ""},
		{a, "eka@third.example", "all"},
	} {
		refused, wait, err := step.h.Take(ctx, step.recipient)
		if err != nil {
			t.Fatal(err)
		}
		if refused != step.refused {
			t.Fatalf("step %d, %s: refused %q, want %q", i, step.recipient, refused, step.refused)
		}
		if refused != "" && wait != 20*time.Minute {
			t.Errorf("step %d: retry after %s, want the 20 min to the hour", i, wait)
		}
	}
	if got := testenv.Metric(t, regA, "sekali_public_checkouts_total", "result", "recipient"); got != 1 {
		t.Errorf("recipient refusals counted on a: %v, want 1", got)
	}
	clock = clock.Add(20 * time.Minute) // 14:00: a new hour
	if refused, _, err := a.Take(ctx, "ana@toko.example"); refused != "" || err != nil {
		t.Errorf("the next hour refused ana: %q %v", refused, err)
	}
}

// Without Redis, a checkout is refused: Take returns the error, and
// counts it unavailable. Nothing is admitted uncounted.
func TestHourlyRefusesWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	opt, err := redisconn.Parse("redis://" + testenv.RefusedAddr(t) + "/0")
	if err != nil {
		t.Fatal(err)
	}
	rdb := redisconn.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	reg := prometheus.NewRegistry()
	h := NewHourly(rdb, Limits{PerRecipient: 1}, "down", reg)
	for range 2 {
		if refused, _, err := h.Take(context.Background(), "ana@toko.example"); err == nil || refused != "" {
			t.Fatalf("without Redis: refused %q, error %v; want an error", refused, err)
		}
	}
	if got := testenv.Metric(t, reg, "sekali_public_checkouts_total", "result", "unavailable"); got != 2 {
		t.Errorf("unavailable = %v, want 2", got)
	}
	if got := testenv.Metric(t, reg, "sekali_public_checkouts_total", "result", "admitted"); got != 0 {
		t.Errorf("admitted = %v without Redis, want 0", got)
	}
}
