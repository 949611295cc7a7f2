package quota

import (
	"context"
	"fmt"
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

// A network (an IPv4 /24, an IPv6 /48) has its share of a domain's cap,
// however many client addresses it has; once the part of the cap open to
// every network is spent, only a network with none of it this hour gets
// one more, its first; other domains are not touched. The cap in all is
// shared out the same way.
func TestHourlyCapsShareADomainAmongNetworks(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	rdb := redisconn.NewClient(rd.Opt)
	t.Cleanup(func() { rdb.Close() })
	reg := prometheus.NewRegistry()
	// A share of 3 of the domain's 10, 8 open to all and 2 kept.
	h := NewHourly(rdb, Limits{PerClient: 5, PerRecipient: 5, PerDomain: 10, NetworkShare: 30, Reserve: 20}, rd.Queue, reg)
	h.now = func() time.Time { return time.Date(2026, 12, 1, 13, 40, 0, 0, time.UTC) }
	ctx := context.Background()
	n := 0
	take := func(client, domain string) string {
		t.Helper()
		n++
		refused, _, err := h.Take(ctx, client, fmt.Sprintf("r%d@%s", n, domain))
		if err != nil {
			t.Fatal(err)
		}
		return refused
	}
	for i, step := range []struct {
		client, domain, refused string
	}{
		{"203.0.113.1", "toko.example", ""},
		{"203.0.113.2", "toko.example", ""},
		{"203.0.113.3", "toko.example", ""},
		{"203.0.113.4", "toko.example", "network"}, // a fourth address of the /24
		{"203.0.113.4", "other.example", ""},       // another domain: a share of its own
		{"198.51.100.1", "toko.example", ""},
		{"198.51.100.1", "toko.example", ""},
		{"198.51.100.1", "toko.example", ""}, // 6
		{"2001:db8:1:1::/64", "toko.example", ""},
		{"2001:db8:1:1::/64", "toko.example", ""},       // 8: the open part is spent
		{"2001:db8:1:1::/64", "toko.example", "domain"}, // a network seen this hour
		{"2001:db8:1:ffff::/64", "toko.example", "domain"},
		{"2001:db8:2:1::/64", "toko.example", ""},       // 9: a network not seen, its first
		{"2001:db8:2:1::/64", "toko.example", "domain"}, // but not its second
		{"192.0.2.1", "toko.example", ""},               // 10
		{"192.0.2.2", "toko.example", "domain"},
		{"2001:db8:3::/64", "toko.example", "domain"}, // the cap is reached, for every network
	} {
		if got := take(step.client, step.domain); got != step.refused {
			t.Fatalf("step %d, %s to %s: refused %q, want %q", i, step.client, step.domain, got, step.refused)
		}
	}
	if got := testenv.Metric(t, reg, "sekali_public_checkouts_total", "result", "network"); got != 1 {
		t.Errorf("refusals by a network's share = %v, want 1", got)
	}

	// The cap in all: 4 a network, 16 open, 4 kept.
	all := NewHourly(rdb, Limits{All: 20, NetworkShare: 20, Reserve: 20}, rd.Queue+"-all", prometheus.NewRegistry())
	admitted := 0
	for c := range 40 { // 40 addresses of one /48, at 40 domains
		if refused, _, err := all.Take(ctx, fmt.Sprintf("2001:db8:9:%x::/64", c), fmt.Sprintf("a@d%d.example", c)); err == nil && refused == "" {
			admitted++
		}
	}
	for c := range 40 { // 40 networks, two each
		for i := range 2 {
			if refused, _, err := all.Take(ctx, fmt.Sprintf("10.%d.0.1", c), fmt.Sprintf("b%d@d%d.example", i, c)); err == nil && refused == "" {
				admitted++
			}
		}
	}
	if admitted != 20 {
		t.Errorf("%d admitted in all, want the cap's 20: 4 to the /48, 12 to the first networks, and the 4 kept to four more", admitted)
	}
}

func TestNetworkOf(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"203.0.113.7":             "203.0.113.0/24",
		"::ffff:203.0.113.7":      "203.0.113.0/24",
		"2001:db8:99:7::/64":      "2001:db8:99::/48",
		"2001:db8:99:7:1:2:3:4":   "2001:db8:99::/48",
		"fe80::1%eth0":            "fe80::/48",
		"@":                       "@", // a peer that is no IP address is its own
		"not an address":          "not an address",
		"2001:db8:99:ffff::1/128": "2001:db8:99::/48",
	} {
		if got := networkOf(in); got != want {
			t.Errorf("networkOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLimitsOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		l                  Limits
		limit, share, open int
	}{
		{Limits{NetworkShare: 10, Reserve: 20}, 300, 30, 240},
		{Limits{NetworkShare: 10, Reserve: 20}, 3000, 300, 2400},
		{Limits{NetworkShare: 10, Reserve: 20}, 5, 1, 4}, // a share is at least one
		{Limits{}, 300, 0, 300},                          // no share, nothing kept
		{Limits{NetworkShare: 10}, 0, 0, 0},              // no cap
	} {
		if share, open := tt.l.of(tt.limit); share != tt.share || open != tt.open {
			t.Errorf("%+v of %d: share %d, open %d; want %d, %d", tt.l, tt.limit, share, open, tt.share, tt.open)
		}
	}
}
