package smtp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/pace"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// postfixDisconnect is logged when a session ends.
const postfixDisconnect = "]: disconnect from "

// postfixSMTP is a provider sending through pf, as one worker's would.
func postfixSMTP(t *testing.T, pf *testenv.Postfix, idle time.Duration) *smtp.Provider {
	t.Helper()
	p, err := smtp.New(smtp.Config{Host: pf.Host, Port: pf.Port, TLS: smtp.TLSNone, HeloName: "worker-7.shop.example",
		From: "orders@" + mailDomain, IdempotencyHeader: "Idempotency-Key", Timeout: 5 * time.Second, MaxIdle: 4, IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func postfixMessage(n int) mail.Message {
	return mail.Message{To: fmt.Sprintf("r%d@example.com", n), Subject: "s", Text: "t", MessageID: fmt.Sprintf("pf%d@%s", n, mailDomain), IdempotencyKey: fmt.Sprint(n)}
}

// A real relay's limits, met the way two workers meet them: Postfix's
// replies over its limits are a pace of the limit they name (not the
// breaker's "unavailable"); the probe reuses the kept connection and
// spends no message, its pace notwithstanding; a kept connection idle
// past SMTP_IDLE_TIMEOUT is closed, which frees the relay's cap for the
// other worker.
func TestPostfixLimitsAreAPaceAndTheProbeSpendsNothing(t *testing.T) {
	t.Parallel()
	mp := testenv.StartMailpit(t, testenv.MailpitOptions{})
	pf := testenv.StartPostfix(t, mp.SMTPAddr(), testenv.PostfixOptions{MessageRateLimit: 1, ConnectionCountLimit: 1, RateTimeUnit: time.Hour})
	ctx := context.Background()
	const idle = 700 * time.Millisecond
	a, b := postfixSMTP(t, pf, idle), postfixSMTP(t, pf, idle)
	ok := func() error { return nil }

	if _, err := a.Send(ctx, postfixMessage(1), ok); err != nil {
		t.Fatal(err)
	}
	var se *mail.SendError
	_, err := a.Send(ctx, postfixMessage(2), func() error { t.Error("handed over past the message rate"); return nil })
	if !errors.As(err, &se) || se.Outcome != mail.OutcomeThrottled || se.Throttle != mail.ThrottleMessages || se.Stage != mail.StageSender || se.Reply.Code != 450 {
		t.Errorf("past the message rate: %v, want throttled at MAIL FROM for messages (450 4.7.1 too much mail)", err)
	}
	// Its connection is kept: the probe's NOOP there spends neither a
	// MAIL FROM (the relay's one message an hour is spent, and its pace
	// is no refusal of our sender) nor a connection (its one at once is
	// taken).
	for range 3 {
		if err := a.Probe(ctx); err != nil {
			t.Fatalf("probe over the kept connection: %v", err)
		}
	}
	_, err = b.Send(ctx, postfixMessage(3), func() error { t.Error("handed over past the connection count"); return nil })
	if !errors.As(err, &se) || se.Outcome != mail.OutcomeThrottled || se.Throttle != mail.ThrottleConnections || se.Stage != mail.StageConnect || se.Reply.Code != 421 {
		t.Errorf("a second connection: %v, want throttled at connect for connections (421 4.7.0 too many connections)", err)
	}
	testenv.WaitFor(t, "postfix's log of both refusals", 5*time.Second, func() bool {
		return pf.Count(testenv.PostfixMessageRate) == 1 && pf.Count(testenv.PostfixConnectionCount) == 1
	})
	if n := pf.Count(testenv.PostfixConnect); n != 2 {
		t.Errorf("postfix took %d connections, want 2 (a's, kept for its probes, and b's, refused):\n%s", n, pf.Log())
	}

	// Once a's connection has been idle for SMTP_IDLE_TIMEOUT it is
	// closed, and b may connect.
	start := time.Now()
	testenv.WaitFor(t, "a's kept connection to be closed", 10*time.Second, func() bool { return pf.Count(postfixDisconnect) == 2 })
	if waited := time.Since(start); waited > idle+3*time.Second {
		t.Errorf("a's connection closed %s after its last use, want about %s", waited.Round(time.Millisecond), idle)
	}
	if err := b.Probe(ctx); err != nil {
		t.Errorf("b's probe once a's connection is closed: %v", err)
	}
	if n := mp.Count(t); n != 1 {
		t.Errorf("%d messages at Mailpit, want 1", n)
	}
}

// Two workers whose sends outnumber the connections a relay allows at
// once keep within it: each starts at two, the one the relay refuses is
// cut to what it still holds, and every message goes, each once, with
// one refused connection at most a worker instead of one for each send
// that found the relay full.
func TestConnectionsAtOnceKeepWithinTheRelaysCap(t *testing.T) {
	t.Parallel()
	mp := testenv.StartMailpit(t, testenv.MailpitOptions{})
	pf := testenv.StartPostfix(t, mp.SMTPAddr(), testenv.PostfixOptions{ConnectionCountLimit: 3})
	workers := []*smtp.Provider{postfixSMTP(t, pf, 5*time.Second), postfixSMTP(t, pf, 5*time.Second)}
	const senders, each = 8, 5
	var wg sync.WaitGroup
	var throttled atomic.Int32
	for w, p := range workers {
		for g := range senders {
			wg.Go(func() {
				for i := range each {
					n := (w*senders+g)*each + i
					for {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						_, err := p.Send(ctx, postfixMessage(n), func() error { return nil })
						cancel()
						var se *mail.SendError
						if err == nil {
							break
						}
						if !errors.As(err, &se) || se.Outcome != mail.OutcomeThrottled {
							t.Errorf("message %d: %v, want sent or throttled", n, err)
							return
						}
						throttled.Add(1)
						b, o := p.Connections()
						t.Logf("worker %d message %d: %v (bound %d, open %d)", w, n, err, b, o)
						time.Sleep(pace.DefaultPause) // as the worker pauses after a refusal for pace
					}
				}
			})
		}
	}
	wg.Wait()
	const total = 2 * senders * each
	testenv.WaitFor(t, "every message at Mailpit", 20*time.Second, func() bool { return mp.Count(t) >= total })
	if n := mp.Count(t); n != total {
		t.Errorf("%d messages at Mailpit, want %d, each once", n, total)
	}
	refused := pf.Count(testenv.PostfixConnectionCount)
	var bounds []int
	sum := 0
	for _, p := range workers {
		b, _ := p.Connections()
		bounds = append(bounds, b)
		sum += b
	}
	t.Logf("%d sends from %d goroutines: %d connections, %d refused, %d sends throttled; bounds %v", total, 2*senders,
		pf.Count(testenv.PostfixConnect), refused, throttled.Load(), bounds)
	if refused > len(workers) {
		t.Errorf("postfix refused %d connections for their number, want one a worker at most", refused)
	}
	if sum > 3 {
		t.Errorf("the workers' bounds %v allow %d connections at once, want the relay's 3 at most", bounds, sum)
	}
}
