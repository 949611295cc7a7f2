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
		refused, wait, err := step.h.Take(ctx, "192.0.2.1", step.recipient)
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
	if refused, _, err := a.Take(ctx, "192.0.2.1", "ana@toko.example"); refused != "" || err != nil {
		t.Errorf("the next hour refused ana: %q %v", refused, err)
	}
}

// A client address has confirmations mailed to at most PerClient
// distinct recipients an hour, on every replica: a shopper who orders
// again to her own address spends nothing more, a client refused costs
// no other client and no other cap anything, and the next hour starts
// afresh.
func TestHourlyCapsDistinctRecipientsPerClient(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	rdb := redisconn.NewClient(rd.Opt)
	t.Cleanup(func() { rdb.Close() })
	clock := time.Date(2026, 12, 1, 13, 40, 0, 0, time.UTC)
	reg := prometheus.NewRegistry()
	replica := func(reg *prometheus.Registry) *Hourly {
		h := NewHourly(rdb, Limits{PerClient: 2, PerRecipient: 2, All: 6}, rd.Queue, reg)
		h.now = func() time.Time { return clock }
		return h
	}
	a, b := replica(reg), replica(prometheus.NewRegistry())
	ctx := context.Background()
	const flooder, shopper = "203.0.113.7", "2001:db8:1:2::/64"
	for i, step := range []struct {
		h                 *Hourly
		client, recipient string
		refused           string
	}{
		{a, flooder, "ana@toko.example", ""},
		{b, flooder, "ana@toko.example", ""}, // her second order: still one recipient
		{a, flooder, "budi@toko.example", ""},
		{b, flooder, "citra@toko.example", "client"},
		{a, flooder, "dewi@other.example", "client"},
		{b, flooder, "budi@toko.example", ""},         // one it has mailed already
		{a, flooder, "ana@toko.example", "recipient"}, // the cap per recipient still holds
		{b, shopper, "citra@toko.example", ""},        // the flooder's refusals cost her nothing
		{a, shopper, "eka@third.example", ""},
		{b, shopper, "fajar@third.example", "client"},
	} {
		refused, _, err := step.h.Take(ctx, step.client, step.recipient)
		if err != nil {
			t.Fatal(err)
		}
		if refused != step.refused {
			t.Fatalf("step %d, %s to %s: refused %q, want %q", i, step.client, step.recipient, refused, step.refused)
		}
	}
	if got := testenv.Metric(t, reg, "sekali_public_checkouts_total", "result", "client"); got != 1 {
		t.Errorf("client refusals counted on a: %v, want 1", got)
	}
	// 6 admitted: the cap in all is reached by the next one, whoever sends it.
	if refused, _, _ := a.Take(ctx, "198.51.100.1", "gita@fourth.example"); refused != "all" {
		t.Errorf("a new client past the cap in all: refused %q, want all", refused)
	}
	clock = clock.Add(20 * time.Minute)
	if refused, _, err := b.Take(ctx, flooder, "citra@toko.example"); refused != "" || err != nil {
		t.Errorf("the next hour refused the client: %q %v", refused, err)
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
	h := NewHourly(rdb, Limits{PerClient: 5, PerRecipient: 1}, "down", reg)
	for range 2 {
		if refused, _, err := h.Take(context.Background(), "192.0.2.1", "ana@toko.example"); err == nil || refused != "" {
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
