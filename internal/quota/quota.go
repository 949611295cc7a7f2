// Package quota counts what anonymous callers ask the service to do,
// per hour, in Redis, so that every API replica shares one count: the
// public checkout's confirmations per recipient, per recipient domain
// and in all (order.PublicRules).
package quota

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Limits are the hourly caps; 0 turns one off.
type Limits struct {
	PerRecipient int // confirmations to one address
	PerDomain    int // confirmations to the addresses of one domain
	All          int // confirmations in all: past it, SekaliCheckoutFlood fires
}

// Hourly counts in fixed hours (UTC): a count starts at 0 on the hour.
type Hourly struct {
	rdb    redis.UniversalClient
	limits Limits
	prefix string
	log    *slog.Logger
	now    func() time.Time
	taken  *prometheus.CounterVec
}

// Results of Take, the label values of sekali_public_checkouts_total.
var results = []string{"admitted", "recipient", "domain", "all", "uncounted"}

// NewHourly counts in rdb under keys that start with prefix (one
// deployment's: e.g. its queue's name), and registers
// sekali_public_checkouts_total with reg.
func NewHourly(rdb redis.UniversalClient, limits Limits, prefix string, log *slog.Logger, reg prometheus.Registerer) *Hourly {
	h := &Hourly{
		rdb: rdb, limits: limits, prefix: "sekali:quota:" + prefix + ":", log: log, now: time.Now,
		taken: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sekali_public_checkouts_total",
			Help: "Anonymous checkouts (CHECKOUT_MODE=public) by what their quota said: admitted, refused by the cap per recipient, per domain or in all, or uncounted (Redis did not answer; admitted).",
		}, []string{"result"}),
	}
	for _, r := range results {
		h.taken.WithLabelValues(r) // at zero from the start: an increase() alert fires on the first one
	}
	reg.MustRegister(h.taken)
	return h
}

// takeScript checks the three counts of this hour against their limits
// (ARGV 1 to 3, 0 for none) and, if none is reached, adds one to each,
// which live ARGV[4] seconds. It answers 0, or the position of the first
// limit reached. The keys share a hash tag (the hour), so that a Redis
// Cluster keeps them on one node.
var takeScript = redis.NewScript(`
for i = 1, 3 do
  local limit = tonumber(ARGV[i])
  if limit > 0 and tonumber(redis.call('GET', KEYS[i]) or '0') >= limit then
    return i
  end
end
for i = 1, 3 do
  if redis.call('INCR', KEYS[i]) == 1 then
    redis.call('EXPIRE', KEYS[i], ARGV[4])
  end
end
return 0
`)

// Take counts one confirmation to recipient, a normalized address, or
// says which limit it is over and how long until the next hour. When
// Redis does not answer it admits the confirmation, logs a warning and
// counts it uncounted: a shop's storefront keeps taking orders while
// Redis restarts, and the worker cannot send them until it is back.
func (h *Hourly) Take(ctx context.Context, recipient string) (refused string, retryAfter time.Duration) {
	now := h.now().UTC()
	hour := now.Truncate(time.Hour)
	tag := h.prefix + "{" + hour.Format("2006010215") + "}:"
	_, domain, _ := strings.Cut(recipient, "@")
	keys := []string{tag + "r:" + digest(recipient), tag + "d:" + digest(domain), tag + "all"}
	ttl := int(hour.Add(time.Hour).Sub(now).Seconds()) + 60
	n, err := takeScript.Run(ctx, h.rdb, keys, h.limits.PerRecipient, h.limits.PerDomain, h.limits.All, ttl).Int()
	if err != nil {
		h.log.WarnContext(ctx, "public checkout admitted uncounted: its quota could not be counted", "error", err.Error())
		h.taken.WithLabelValues("uncounted").Inc()
		return "", 0
	}
	if n == 0 {
		h.taken.WithLabelValues("admitted").Inc()
		return "", 0
	}
	refused = results[n]
	h.taken.WithLabelValues(refused).Inc()
	return refused, hour.Add(time.Hour).Sub(now)
}

// digest names an address or domain in a key without spelling it out:
// Redis keeps no customer's address.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// String describes the limits for the API's start-up line.
func (l Limits) String() string {
	per := func(n int) string {
		if n == 0 {
			return "none"
		}
		return strconv.Itoa(n) + "/h"
	}
	return "per recipient " + per(l.PerRecipient) + ", per domain " + per(l.PerDomain) + ", in all " + per(l.All)
}
