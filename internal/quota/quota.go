// Package quota counts what anonymous callers ask the service to do,
// per hour, in Redis, so that every API replica shares one count: the
// public checkout's confirmations per client address, per recipient, per
// recipient domain and in all (order.PublicRules).
package quota

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/metric"
)

// Limits are the hourly caps; 0 turns one off.
type Limits struct {
	PerClient    int // distinct recipients one client address (an IPv6 client: its /64) may have mailed
	PerRecipient int // confirmations to one address
	PerDomain    int // confirmations to the addresses of one domain
	All          int // confirmations in all: past it, SekaliCheckoutFlood fires
}

// Hourly counts in fixed hours (UTC): a count starts at 0 on the hour.
type Hourly struct {
	rdb    redis.UniversalClient
	limits Limits
	prefix string
	now    func() time.Time
	taken  *prometheus.CounterVec
}

// Results of Take, the label values of sekali_public_checkouts_total:
// takeScript's answer is the index of its refusal.
var results = []string{"admitted", "recipient", "domain", "all", "client", "unavailable"}

// NewHourly counts in rdb under keys that start with prefix (one
// deployment's: e.g. its queue's name), and registers
// sekali_public_checkouts_total with reg.
func NewHourly(rdb redis.UniversalClient, limits Limits, prefix string, reg prometheus.Registerer) *Hourly {
	h := &Hourly{
		rdb: rdb, limits: limits, prefix: "sekali:quota:" + prefix + ":", now: time.Now,
		taken: metric.CounterVec(reg, "sekali_public_checkouts_total",
			"Anonymous checkouts (CHECKOUT_MODE=public) by what their quota said: admitted, refused by the cap per client address, per recipient, per domain or in all, or unavailable (Redis did not answer; refused).",
			[]string{"result"}, results),
	}
	return h
}

// takeScript checks this hour's counts against their limits and, if
// none is reached, counts the confirmation. KEYS are the counts per
// recipient, per domain and in all, and the set of the recipients the
// client has had mailed; ARGV their four limits (0 for none), the keys'
// life in seconds, and the recipient as a member of that set. A
// recipient already in the set costs the client nothing more, and the
// set never holds more than the client's limit. It answers 0, or the
// index in results of the first limit reached. The keys share a hash tag
// (the hour), so that a Redis Cluster keeps them in one slot, as a
// script's keys must be.
var takeScript = redis.NewScript(`
local perClient = tonumber(ARGV[4])
local known = perClient == 0 or redis.call('SISMEMBER', KEYS[4], ARGV[6]) == 1
if not known and redis.call('SCARD', KEYS[4]) >= perClient then
  return 4
end
for i = 1, 3 do
  local limit = tonumber(ARGV[i])
  if limit > 0 and tonumber(redis.call('GET', KEYS[i]) or '0') >= limit then
    return i
  end
end
for i = 1, 3 do
  if redis.call('INCR', KEYS[i]) == 1 then
    redis.call('EXPIRE', KEYS[i], ARGV[5])
  end
end
if not known then
  redis.call('SADD', KEYS[4], ARGV[6])
  redis.call('EXPIRE', KEYS[4], ARGV[5])
end
return 0
`)

// Take counts one confirmation to recipient, the mailbox a normalized
// address reaches (one key for all its spellings: mail.Mailbox), asked
// for by client (the caller's address, as the API's rate limiter names
// it), or says which limit it is over and how long until the next hour.
// When Redis does not answer it counts the checkout unavailable and
// returns the error: whoever cannot count must not admit, for what is
// admitted uncounted is mailed uncapped once the worker reaches Redis.
func (h *Hourly) Take(ctx context.Context, client, recipient string) (refused string, retryAfter time.Duration, err error) {
	now := h.now().UTC()
	hour := now.Truncate(time.Hour)
	tag := h.prefix + "{" + hour.Format("2006010215") + "}:"
	_, domain, _ := strings.Cut(recipient, "@")
	to := digest(recipient)
	keys := []string{tag + "r:" + to, tag + "d:" + digest(domain), tag + "all", tag + "c:" + digest(client)}
	ttl := int(hour.Add(time.Hour).Sub(now).Seconds()) + 60
	l := h.limits
	n, err := takeScript.Run(ctx, h.rdb, keys, l.PerRecipient, l.PerDomain, l.All, l.PerClient, ttl, to).Int()
	if err != nil {
		if ctx.Err() == nil { // not a caller that left: Redis did not answer
			h.taken.WithLabelValues("unavailable").Inc()
		}
		return "", 0, fmt.Errorf("count the public checkout's quota: %w", err)
	}
	if n == 0 {
		h.taken.WithLabelValues("admitted").Inc()
		return "", 0, nil
	}
	refused = results[n]
	h.taken.WithLabelValues(refused).Inc()
	return refused, hour.Add(time.Hour).Sub(now), nil
}

// digest names an address, a domain or a client in a key without
// spelling it out: Redis keeps no customer's address.
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
	return "distinct recipients per client " + per(l.PerClient) + ", per recipient " + per(l.PerRecipient) +
		", per domain " + per(l.PerDomain) + ", in all " + per(l.All)
}
