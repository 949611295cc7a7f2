package order

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/quota"
	"github.com/sekali-dev/sekali/internal/redisconn"
)

// A storefront that lost the answer to its checkout and retries it under
// its Idempotency-Key gets that answer, its order and access token, even
// with the recipient's hourly cap used up by that very checkout: a
// replay mails nothing, so it spends no quota, and neither does a key
// refused as reused. The cap still holds for what would be mailed.
func TestPublicReplaySpendsNoQuota(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rdb := redisconn.NewClient(e.redis.Opt)
	t.Cleanup(func() { rdb.Close() })
	e.svc.Public = &PublicRules{Quota: quota.NewHourly(rdb, quota.Limits{PerRecipient: 1}, e.redis.Queue, prometheus.NewRegistry())}
	storefront, key := Caller{Client: "203.0.113.7"}, uuid.NewString()

	first, err := e.svc.Place(t.Context(), basket(), storefront, key)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		again, err := e.svc.Place(t.Context(), basket(), storefront, key)
		if err != nil || !again.Replayed || !bytes.Equal(again.JSON, first.JSON) {
			t.Fatalf("retry %d: replayed %v, %v; want the first answer", i+1, again.Replayed, err)
		}
	}
	if _, err := e.svc.Place(t.Context(), with(func(c *Checkout) { c.Items[0].Quantity = 3 }), storefront, key); !errors.Is(err, ErrKeyReused) {
		t.Errorf("another checkout under the key: %v, want ErrKeyReused", err)
	}
	var qerr *QuotaError
	if _, err := e.svc.Place(t.Context(), basket(), storefront, uuid.NewString()); !errors.As(err, &qerr) || qerr.Limit != "recipient" {
		t.Errorf("a second checkout to the recipient: %v, want the cap per recipient", err)
	}
	if n := e.count(t, "orders"); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}
