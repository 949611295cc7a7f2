package httpprovidertest

import (
	"sync"
	"time"
)

// RateLimit is a provider's limit on requests, shared by every request a
// fake counts against it: at most N admitted in any window of length Per
// (a sliding window, kept as the times of the requests it admitted). A
// sliding window is the strictest reading of "N requests per second": a
// client that keeps to it keeps to a fixed window and to a token bucket
// of the same N too, while a fixed window would let 2N through across
// its edge, which a provider that counts otherwise refuses. Refused
// requests are not counted against the window, as a token bucket takes
// no token for them.
//
// The zero value admits everything; its methods are safe for concurrent
// use.
type RateLimit struct {
	mu       sync.Mutex
	n        int
	per      time.Duration
	admitted []time.Time // within the window, oldest first
	refused  int
}

// Set limits the requests to n per window per (a second when 0); n = 0
// lifts the limit.
func (l *RateLimit) Set(n int, per time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if per <= 0 {
		per = time.Second
	}
	l.n, l.per, l.admitted = n, per, nil
}

// RateVerdict is what RateLimit.Take decided about one request.
type RateVerdict struct {
	OK        bool // admitted
	Limited   bool // a limit is set: Limit, Remaining and Reset mean something
	Limit     int  // N
	Remaining int  // how many more the window admits now, this request counted
	// Reset is how long until the oldest request the window holds
	// leaves it, and Remaining grows by one; 0 when it holds none.
	Reset time.Duration
}

// Take counts a request arriving at now against the limit.
func (l *RateLimit) Take(now time.Time) RateVerdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n <= 0 {
		return RateVerdict{OK: true}
	}
	start := 0
	for start < len(l.admitted) && !now.Before(l.admitted[start].Add(l.per)) {
		start++
	}
	l.admitted = l.admitted[start:]
	v := RateVerdict{Limited: true, Limit: l.n}
	if len(l.admitted) < l.n {
		l.admitted = append(l.admitted, now)
		v.OK = true
	} else {
		l.refused++
	}
	v.Remaining = l.n - len(l.admitted)
	if len(l.admitted) > 0 {
		v.Reset = l.admitted[0].Add(l.per).Sub(now)
	}
	return v
}

// Refused counts the requests refused so far.
func (l *RateLimit) Refused() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused
}

// Seconds is d in whole seconds, rounded up: the delta-seconds of a
// retry-after or a ratelimit-reset, which say "not before".
func Seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}
