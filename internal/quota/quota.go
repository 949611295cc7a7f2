// Package quota counts what anonymous callers ask the service to do,
// per hour, in Redis, so that every API replica shares one count: the
// public checkout's confirmations per client address, per recipient, per
// recipient domain and in all, and each client network's share of the
// last two (order.PublicRules).
package quota

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
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
	PerRecipient int // confirmations to one mailbox
	PerDomain    int // confirmations to the mailboxes of one domain
	All          int // confirmations in all: past it, SekaliCheckoutFlood fires
	// NetworkShare is the percentage of each domain's cap and of the cap
	// in all that the clients of one network (an IPv4 /24, an IPv6 /48)
	// may have between them.
	NetworkShare int
	// Reserve is the percentage of each domain's cap and of the cap in
	// all kept for networks that have had none of it this hour: once the
	// rest is spent, a network has one more, its first.
	Reserve int
}

// of is the part of limit a network may have (share) and the part open
// to every network (open), the rest being the reserve, by l's
// percentages; a share of 0 is none.
func (l Limits) of(limit int) (share, open int) {
	if limit <= 0 {
		return 0, 0
	}
	if l.NetworkShare > 0 {
		share = max((limit*l.NetworkShare+99)/100, 1)
	}
	return share, limit - limit*l.Reserve/100
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
var results = []string{"admitted", "recipient", "domain", "all", "client", "unavailable", "network"}

// NewHourly counts in rdb under keys that start with prefix (one
// deployment's: e.g. its queue's name), and registers
// sekali_public_checkouts_total with reg.
func NewHourly(rdb redis.UniversalClient, limits Limits, prefix string, reg prometheus.Registerer) *Hourly {
	h := &Hourly{
		rdb: rdb, limits: limits, prefix: "sekali:quota:" + prefix + ":", now: time.Now,
		taken: metric.CounterVec(reg, "sekali_public_checkouts_total",
			"Anonymous checkouts (CHECKOUT_MODE=public) by what their quota said: admitted, refused by the cap per client address, per recipient, per domain or in all, by the share of the client's network, or unavailable (Redis did not answer; refused).",
			[]string{"result"}, results),
	}
	return h
}

// takeScript checks this hour's counts against their limits and, if
// none is reached, counts the confirmation. KEYS are the counts per
// recipient, per domain and in all, the set of the recipients the client
// has had mailed, and the counts of the client's network for the domain
// and in all; ARGV the limits per recipient, per domain, in all and per
// client (0 for none), the keys' life in seconds, the recipient as a
// member of the client's set, then for the domain and for all the
// network's share (0 for none) and the part open to every network. A
// recipient already in the set costs the client nothing more, and the
// set never holds more than the client's limit. Past the open part of
// the domain's cap or of the cap in all, only a network with none of it
// this hour is let in. It answers 0, or the index in results of the
// first limit reached. The keys share a hash tag (the hour), so that a
// Redis Cluster keeps them in one slot, as a script's keys must be.
var takeScript = redis.NewScript(`
local perClient = tonumber(ARGV[4])
local known = perClient == 0 or redis.call('SISMEMBER', KEYS[4], ARGV[6]) == 1
if not known and redis.call('SCARD', KEYS[4]) >= perClient then
  return 4
end
local perRecipient = tonumber(ARGV[1])
if perRecipient > 0 and tonumber(redis.call('GET', KEYS[1]) or '0') >= perRecipient then
  return 1
end
-- the domain's cap and the cap in all: its count, the network's, the
-- network's share and the open part
for _, c in ipairs({{2, 5, 7, 8}, {3, 6, 9, 10}}) do
  local limit = tonumber(ARGV[c[1]])
  if limit > 0 then
    local n = tonumber(redis.call('GET', KEYS[c[1]]) or '0')
    local mine = tonumber(redis.call('GET', KEYS[c[2]]) or '0')
    local share, open = tonumber(ARGV[c[3]]), tonumber(ARGV[c[4]])
    if n >= limit then
      return c[1]
    end
    if share > 0 and mine >= share then
      return 6
    end
    if n >= open and mine > 0 then
      return c[1]
    end
  end
end
for _, k in ipairs({1, 2, 3, 5, 6}) do
  if redis.call('INCR', KEYS[k]) == 1 then
    redis.call('EXPIRE', KEYS[k], ARGV[5])
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
	to, network := digest(recipient), networkOf(client)
	keys := []string{tag + "r:" + to, tag + "d:" + digest(domain), tag + "all", tag + "c:" + digest(client),
		tag + "nd:" + digest(network+" "+domain), tag + "na:" + digest(network)}
	ttl := int(hour.Add(time.Hour).Sub(now).Seconds()) + 60
	l := h.limits
	domainShare, domainOpen := l.of(l.PerDomain)
	allShare, allOpen := l.of(l.All)
	n, err := takeScript.Run(ctx, h.rdb, keys, l.PerRecipient, l.PerDomain, l.All, l.PerClient, ttl, to,
		domainShare, domainOpen, allShare, allOpen).Int()
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

// networkOf is the network of a client, as the API's rate limiter names
// it (an IPv4 address, or an IPv6 /64): its /24, or its /48, which one
// holder usually has whole (a tunnel broker hands out /48s for free, a
// cloud a /24 of addresses). Anything else is its own network.
func networkOf(client string) string {
	a, err := netip.ParseAddr(client)
	if err != nil {
		p, perr := netip.ParsePrefix(client)
		if perr != nil {
			return client
		}
		a = p.Addr()
	}
	bits := 48
	if a = a.Unmap(); a.Is4() {
		bits = 24
	}
	return netip.PrefixFrom(a.WithZone(""), bits).Masked().String()
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
		", per domain " + per(l.PerDomain) + ", in all " + per(l.All) +
		"; a network's share " + strconv.Itoa(l.NetworkShare) + "%, kept for networks not seen " + strconv.Itoa(l.Reserve) + "%"
}
