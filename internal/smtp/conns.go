package smtp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
)

// Connections at once. A relay caps the connections a client holds at
// once (Postfix's smtpd_client_connection_count_limit, Microsoft 365's
// and Google's per-account caps) and answers one more with 421 "too many
// connections", counting every process of ours together. Each process
// keeps its connections (in use and kept idle) within a bound it learns
// as TCP learns a window, and as Postfix's own scheduler learns a
// destination's concurrency: it starts at initialConnections and grows
// by one, up to SMTP_CONNECTIONS, once sends waited for a connection
// while the relay took growEvery messages a connection, and refused
// nothing for pace for connGrowAfter (more connections help only where
// the relay's own limits do not bind); it is halved when the relay
// refuses a connection for their number: every process halving, they
// come to share the cap (additive increase, multiplicative decrease). A
// send that finds the bound reached waits for a connection, within its
// own time.

// DefaultConnections is SMTP_CONNECTIONS' default: the most connections
// a process opens at once, the worker's default concurrency.
const DefaultConnections = 10

// initialConnections is the bound a process starts at: two workers of
// a new deployment hold four, within a relay's cap of five (Postfix's
// anvil examples; Microsoft 365's SMTP AUTH allows three).
const initialConnections = 2

// connGrowAfter is how long after the relay's last refusal for pace
// (of a connection, or of a message) the bound may not grow.
const connGrowAfter = time.Minute

// growEvery is how many messages a connection the relay takes, without
// a refusal for pace, before the bound grows by one.
const growEvery = 8

// errNoConnection: no connection came free within the send's time.
var errNoConnection = errors.New("no connection to the relay came free within the send's time (SMTP_CONNECTIONS, learned from the relay's refusals)")

// conn returns a connection for a send: a kept one when reuse allows,
// else a new one within the bound, waiting while it is reached.
func (s *Provider) conn(ctx context.Context, reuse bool) (c *smtpConn, reused bool, err error) {
	for {
		s.mu.Lock()
		if reuse {
			if c := s.takeLocked(); c != nil {
				s.mu.Unlock()
				return c, true, nil
			}
		}
		if !reuse && s.open >= s.bound && len(s.idle) > 0 {
			// A fresh one is wanted and kept ones hold the slots: the one
			// kept longest makes room.
			c := s.idle[0]
			s.idle = s.idle[1:]
			c.expiry.Stop()
			s.mu.Unlock()
			s.discard(c, true)
			continue
		}
		if s.open < s.bound {
			s.open++
			s.mu.Unlock()
			c, err := s.dial(ctx)
			if err != nil {
				s.refused(err)
			}
			return c, false, err
		}
		wake := s.wake
		s.waited = true
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, false, &mail.SendError{Outcome: mail.OutcomeThrottled, Stage: mail.StageConnect, Throttle: mail.ThrottleConnections,
				Err: fmt.Errorf("%w: %w", errNoConnection, ctx.Err())}
		case <-wake:
		}
	}
}

// refused gives back the slot of a connection that could not be opened,
// and cuts the bound to the connections still open when the relay
// refused it for their number.
func (s *Provider) refused(err error) {
	var se *mail.SendError
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	s.paced(err)
	if errors.As(err, &se) && se.Outcome == mail.OutcomeThrottled && se.Throttle == mail.ThrottleConnections {
		// Halved from the number the relay refused: it counts every
		// process's, so that all of them back off and share the cap.
		s.bound = max(1, min(s.bound, s.open+1)/2)
	}
	s.wakeLocked()
}

// deliveredOne counts a message the relay took, and grows the bound
// when sends waited for a connection, the relay took growEvery messages
// a connection since the bound last changed, and it refused nothing for
// pace for connGrowAfter.
func (s *Provider) deliveredOne() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delivered++
	if s.waited && s.bound < s.cfg.Connections && s.delivered >= growEvery*s.bound && time.Since(s.pacedAt) >= connGrowAfter {
		s.bound++
		s.delivered, s.waited = 0, false
		s.wakeLocked()
	}
}

// paced notes a refusal for pace, when err is one: the relay's limits
// bind, not our connections, and the bound does not grow for
// connGrowAfter. s.mu is held.
func (s *Provider) paced(err error) {
	var se *mail.SendError
	if errors.As(err, &se) && se.Outcome == mail.OutcomeThrottled {
		s.pacedAt, s.delivered, s.waited = time.Now(), 0, false
	}
}

// discard closes c, politely (QUIT) or not, and gives back its slot.
func (s *Provider) discard(c *smtpConn, polite bool) {
	if polite {
		s.quit(c)
	} else {
		_ = c.Close()
	}
	s.mu.Lock()
	s.open--
	s.wakeLocked()
	s.mu.Unlock()
}

// wakeLocked wakes the sends waiting for a connection; s.mu is held.
func (s *Provider) wakeLocked() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// Connections reports the bound in force and the connections open
// (in use and kept), for tests and the log.
func (s *Provider) Connections() (bound, open int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound, s.open
}
