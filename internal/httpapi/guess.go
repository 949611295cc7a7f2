package httpapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/sekali-dev/sekali/internal/apikey"
)

// operatorGuard makes a failed guess at an operator's credential (an
// operator key, ADMIN_TOKEN) on the admin API or at the console's
// sign-in cost the guesser, not the operators. A failure counts against
// its client address and, for a token of a key's shape, against the
// key's prefix it names; each has its backoff (operatorBackoff). Before
// any look-up, a token whose prefix has failed too often waits, wherever
// it comes from; an address that has failed too often waits for
// anything but a live operator key's prefix (which a stranger does not
// know: an operator's key and session go on working from an office
// whose NAT a stranger shares), and for that, only as its prefix does.
// So guessing ADMIN_TOKEN, or keys at random, is as slow from one
// address as it was, and guessing one operator's key as slow from any
// number of addresses.
type operatorGuard struct {
	keys             operatorKeys // nil: no key is known to be an operator's
	byAddr, byPrefix *backoff
}

// operatorKeys says which key prefixes are live operators' (*apikey.Service).
type operatorKeys interface {
	IsOperator(ctx context.Context, prefix string) (bool, error)
}

// operatorBackoff: 10 failures free, then 90 s until the next may be
// tried, twice that after each further one, up to an hour; a quiet hour
// past the wait starts afresh. (It was a bucket of 10 refilled one
// every 90 s per address, which a stranger kept empty for everyone
// there with one bad token every 90 s.)
var operatorBackoff = backoffPolicy{free: 10, base: 90 * time.Second, maxWait: time.Hour, forgive: time.Hour}

func newOperatorGuard(keys *apikey.Service) *operatorGuard {
	g := &operatorGuard{byAddr: newBackoff(operatorBackoff), byPrefix: newBackoff(operatorBackoff)}
	if keys != nil {
		g.keys = keys
	}
	return g
}

// wait is how long before token from client may be checked; 0 for now.
func (g *operatorGuard) wait(ctx context.Context, client, token string, now time.Time) time.Duration {
	prefix, isKey := apikey.PrefixOf(token)
	if w := g.byAddr.wait(client, now); w > 0 && !(isKey && g.operator(ctx, prefix)) {
		return w
	}
	if isKey {
		return g.byPrefix.wait(prefix, now)
	}
	return 0
}

// failed counts a token from client that did not pass.
func (g *operatorGuard) failed(client, token string, now time.Time) {
	g.byAddr.fail(client, now)
	if prefix, ok := apikey.PrefixOf(token); ok {
		g.byPrefix.fail(prefix, now)
	}
}

// operator reports whether prefix is a live operator key's; when that
// cannot be read (the database is down), it is not, and the look-up the
// token would get could not pass either.
func (g *operatorGuard) operator(ctx context.Context, prefix string) bool {
	if g.keys == nil {
		return false
	}
	ok, err := g.keys.IsOperator(ctx, prefix)
	return err == nil && ok
}

// guardOperators wraps the admin API's credential check (requireAdmin):
// a token that must wait (operatorGuard.wait) is answered 429 before the
// check runs, and one the check refuses (401, 403) counts as a failure.
// An answer of the check's that is not a refusal (a 500 when the
// database is down) counts nothing.
func guardOperators(g *operatorGuard, addr func(*http.Request) string, check func(http.Handler) http.Handler) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			client, token := addr(r), bearer(r)
			if wait := g.wait(r.Context(), client, token, time.Now()); wait > 0 {
				tooMany(w, r, wait, "Too many failed operator credentials from this client, or with this key")
				return
			}
			if refusedBy(check, next, w, r) {
				g.failed(client, token, time.Now())
			}
		})
	}
}

// backoff counts failures by name (a client address, a key's prefix),
// under its policy. It lives in this process, as the rate limiter's
// buckets do, and keeps at most maxClients names.
type backoff struct {
	backoffPolicy
	mu    sync.Mutex
	names map[string]*streak
}

// backoffPolicy: a name's first free failures cost nothing; after them
// the next may come base after the last, after each further one twice
// as long, up to maxWait; a name with no failure for forgive past its
// wait starts afresh.
type backoffPolicy struct {
	free                   int
	base, maxWait, forgive time.Duration
}

// streak is a name's failures since it last started afresh.
type streak struct {
	failures int
	last     time.Time
}

func newBackoff(p backoffPolicy) *backoff {
	return &backoff{backoffPolicy: p, names: map[string]*streak{}}
}

// delay is how long after its last failure a streak of n must wait.
func (b *backoff) delay(n int) time.Duration {
	if n < b.free {
		return 0
	}
	d := b.base
	for i := b.free; i < n && d < b.maxWait; i++ {
		d *= 2
	}
	return min(d, b.maxWait)
}

// forgiven reports whether s has been quiet long enough to start afresh.
func (b *backoff) forgiven(s *streak, now time.Time) bool {
	return now.Sub(s.last) >= b.delay(s.failures)+b.forgive
}

// wait is how long name must wait before its next try; 0 for none.
func (b *backoff) wait(name string, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.names[name]
	if s == nil {
		return 0
	}
	return max(s.last.Add(b.delay(s.failures)).Sub(now), 0)
}

// fail counts a failure of name's.
func (b *backoff) fail(name string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.names[name]
	if s == nil || b.forgiven(s, now) {
		if s == nil && len(b.names) >= maxClients {
			b.evict(now)
		}
		s = &streak{}
		b.names[name] = s
	}
	s.failures++
	s.last = now
}

// evict drops the streaks forgiven, and if that is not enough, every
// streak whose last failure is at least as old as the mean of those
// left (so at least the oldest one).
func (b *backoff) evict(now time.Time) {
	for k, s := range b.names {
		if b.forgiven(s, now) {
			delete(b.names, k)
		}
	}
	evictIdlest(b.names, func(s *streak) time.Duration { return now.Sub(s.last) })
}
