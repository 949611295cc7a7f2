package httpapi

import (
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit is a token bucket per client: PerSecond requests a second on
// average, Burst at once. A zero PerSecond turns it off.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// RateLimits are the API's budgets: Public per client address for the
// endpoints anyone may call, and for the requests to the backend's routes
// that fail their credential check; Backend per API key (or order access
// token's client address) for the rest. TrustedProxies are the load balancers
// whose X-Forwarded-For names the client; without them the client is the
// connection's peer. The buckets live in this process: with several API
// replicas each has its own, so the budget a client gets is up to
// replicas × the limit (docs/security.md).
type RateLimits struct {
	Public, Backend RateLimit
	TrustedProxies  []netip.Prefix
}

// maxClients bounds the buckets kept: a client address space cannot grow
// memory without end. Past it, the idlest buckets are dropped (evict).
const maxClients = 50_000

// limiter keeps one token bucket per client.
type limiter struct {
	limit   RateLimit
	mu      sync.Mutex
	clients map[string]*bucket
}

type bucket struct {
	tokens *rate.Limiter
	seen   time.Time
}

func newLimiter(l RateLimit) *limiter {
	return &limiter{limit: l, clients: map[string]*bucket{}}
}

func (l *limiter) off() bool { return l == nil || l.limit.PerSecond <= 0 }

// allow takes a token for client, or says how long until one is there.
func (l *limiter) allow(client string, now time.Time) (ok bool, retryAfter time.Duration) {
	if l.off() {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(client, now)
	r := b.tokens.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// empty says whether client has no token left, and how long until it
// has one, without taking one. A client without a bucket has its burst.
func (l *limiter) empty(client string, now time.Time) (bool, time.Duration) {
	if l.off() {
		return false, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.clients[client]
	if b == nil {
		return false, 0
	}
	if missing := 1 - b.tokens.TokensAt(now); missing > 0 {
		return true, time.Duration(missing / l.limit.PerSecond * float64(time.Second))
	}
	return false, 0
}

// spend takes a token of client's if one is left.
func (l *limiter) spend(client string, now time.Time) {
	if l.off() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bucket(client, now).tokens.AllowN(now, 1)
}

// bucket is client's bucket, made full if it has none; l.mu is held.
func (l *limiter) bucket(client string, now time.Time) *bucket {
	b := l.clients[client]
	if b == nil {
		if len(l.clients) >= maxClients {
			l.evict(now)
		}
		b = &bucket{tokens: rate.NewLimiter(rate.Limit(l.limit.PerSecond), max(l.limit.Burst, 1))}
		l.clients[client] = b
	}
	b.seen = now
	return b
}

// evict drops buckets idle for a minute, and if that is not enough, every
// bucket idle at least as long as the mean idle time of those left (so at
// least the idlest one).
func (l *limiter) evict(now time.Time) {
	for k, b := range l.clients {
		if now.Sub(b.seen) > time.Minute {
			delete(l.clients, k)
		}
	}
	evictIdlest(l.clients, func(b *bucket) time.Duration { return now.Sub(b.seen) })
}

// refusedBy serves r through check and, when it lets r in, next; it
// reports whether check refused r with a 4xx of its own (a credential it
// did not take), not next.
func refusedBy(check func(http.Handler) http.Handler, next http.Handler, w http.ResponseWriter, r *http.Request) bool {
	passed := false
	rec := &statusRecorder{ResponseWriter: w}
	check(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		passed = true
		next.ServeHTTP(w, r)
	})).ServeHTTP(rec, r)
	return !passed && rec.status >= 400 && rec.status < 500
}

// evictIdlest drops, when m holds maxClients entries or more, every entry
// idle at least as long as the mean (so at least the idlest one); idle
// says how long an entry has been.
func evictIdlest[V any](m map[string]V, idle func(V) time.Duration) {
	if len(m) < maxClients {
		return
	}
	var total time.Duration
	for _, v := range m {
		total += idle(v)
	}
	mean := total / time.Duration(len(m))
	for k, v := range m {
		if idle(v) >= mean {
			delete(m, k)
		}
	}
}

// limit answers 429 with Retry-After to a client over its budget; client
// names the bucket (an API key, or the client address).
func limit(l *limiter, client func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ok, wait := l.allow(client(r), time.Now()); !ok {
				tooMany(w, r, wait, "Too many requests from this client")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// limitRefusals wraps a credential check (requireKey, requireOrderReader,
// requireAdmin) so that the requests it refuses (401, 403, or 404 for an order token
// that is not the order's) spend a token of their client's bucket in l,
// and a client with none left is answered 429 before the check runs, so
// that guessing keys or order tokens costs no look-up past the budget.
// Requests that pass the check spend nothing here: a backend whose
// credentials are good is limited by its key's budget alone, after the
// check. An answer of the check's that is not a refusal (a 500 when the
// database is down) spends nothing either.
func limitRefusals(l *limiter, client func(*http.Request) string, check func(http.Handler) http.Handler) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if l.off() {
			return check(next)
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := client(r)
			if empty, wait := l.empty(c, time.Now()); empty {
				tooMany(w, r, wait, "Too many requests with credentials that are not valid from this client")
				return
			}
			if refusedBy(check, next, w, r) {
				l.spend(c, time.Now())
			}
		})
	}
}

// tooMany answers 429 with the whole seconds until a token is there.
func tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration, why string) {
	seconds := retryAfter(w, wait)
	writeProblem(w, r, problem{Type: typeRateLimited, Status: http.StatusTooManyRequests,
		Detail: why + "; retry after " + strconv.Itoa(seconds) + " s."})
}

// retryAfter sets Retry-After to the whole seconds (at least one) until
// wait has passed, and returns them.
func retryAfter(w http.ResponseWriter, wait time.Duration) int {
	seconds := max(int(math.Ceil(wait.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.Itoa(seconds))
	return seconds
}

// clientAddr is the request's client: the connection's peer, or, when
// that peer is a trusted proxy, the last address in X-Forwarded-For that
// is not one. An IPv6 client is its /64: one host is usually given a
// whole /64, and could otherwise take a fresh address per request.
func clientAddr(trusted []netip.Prefix) func(*http.Request) string {
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) string {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		peer, err := netip.ParseAddr(host)
		if err != nil {
			return host
		}
		peer = peer.Unmap()
		if !isTrusted(peer) {
			return clientOf(peer)
		}
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break // a forged or broken entry: trust nothing before it
			}
			if a = a.Unmap(); !isTrusted(a) {
				return clientOf(a)
			}
		}
		return clientOf(peer)
	}
}

// clientOf names the client at a: an IPv4 address itself, an IPv6
// address by its /64.
func clientOf(a netip.Addr) string {
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a.WithZone(""), 64).Masked().String()
}

// keyOrAddr is the bucket of a backend request: its API key when it has
// one, else its client address.
func keyOrAddr(addr func(*http.Request) string) func(*http.Request) string {
	return func(r *http.Request) string {
		if k, ok := keyFrom(r.Context()); ok {
			return "key:" + k.ID.String()
		}
		return "addr:" + addr(r)
	}
}
