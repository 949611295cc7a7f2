// Package breaker is a worker's circuit breaker on one mail provider:
// a send the provider refuses as unavailable (it refuses us, not the
// message) opens it, a probe that passes closes it, and a probe that
// passes while sending still fails (a flap) doubles the wait before the
// next probe.
package breaker

import (
	"sync"
	"time"
)

// Breaker is one worker's view of one provider: up, or down since a
// refusal of us until a probe passes. It is safe for concurrent use.
type Breaker struct {
	mu     sync.Mutex
	down   bool
	reason string
	since  time.Time
	up     Gauge
	// A probe can pass while sending fails (an API whose sending
	// endpoint alone is down; a key that may only send, which the probe
	// cannot tell from a working one). Each such pass lets one attempt
	// per worker meet the refusal again, and with failover an HTTP 5xx
	// keeps that delivery waiting for this provider. So a breaker that
	// reopens before any send succeeded (trial) counts a flap, and each
	// flap doubles the wait before the next probe, up to maxFlapBackoff
	// probe intervals; a send that succeeds forgets them.
	trial     bool
	flaps     int
	lastProbe time.Time
}

// maxFlapBackoff bounds the probe's back-off after flaps: 64 probe
// intervals (5 s: about 5 minutes).
const maxFlapBackoff = 6

// Gauge is where a breaker shows its state: its provider's series of
// sekali_provider_up, or nowhere (Nowhere: the test provider, always up,
// which no dashboard needs to see).
type Gauge interface{ Set(float64) }

// Nowhere shows a breaker's state nowhere.
type Nowhere struct{}

// Set implements Gauge.
func (Nowhere) Set(float64) {}

// New returns a breaker that is up, shown on up.
func New(up Gauge) *Breaker {
	up.Set(1)
	return &Breaker{since: time.Now(), up: up}
}

// Available reports whether sends may go to the provider.
func (h *Breaker) Available() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.down
}

// MarkDown opens the breaker (or updates its reason); opened reports a
// transition.
func (h *Breaker) MarkDown(reason string) (opened bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reason = reason
	if h.down {
		return false
	}
	if h.trial {
		h.flaps++
		h.trial = false
	}
	h.down, h.since = true, time.Now()
	h.up.Set(0)
	return true
}

// MarkUp closes the breaker; closed reports a transition.
func (h *Breaker) MarkUp() (closed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		return false
	}
	h.down, h.reason, h.since, h.trial = false, "", time.Now(), true
	h.up.Set(1)
	return true
}

// Sent records a send the provider accepted: the breaker's flaps are
// forgotten.
func (h *Breaker) Sent() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trial, h.flaps = false, 0
}

// ProbeDue reports whether an open breaker is due for a probe at now,
// every interval, doubled per flap; it notes the probe.
func (h *Breaker) ProbeDue(now time.Time, interval time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down || now.Sub(h.lastProbe) < interval<<min(h.flaps, maxFlapBackoff)-interval/10 {
		return false
	}
	h.lastProbe = now
	return true
}

// State is whether the breaker is open, why, and since when.
func (h *Breaker) State() (down bool, reason string, since time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down, h.reason, h.since
}
