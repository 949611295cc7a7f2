package smtp_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

const mailDomain = "shop.example"

// The provider against a real server we did not write (Mailpit): our own
// sink once forgave envelope paths without angle brackets, which Mailpit
// refuses (501 5.5.4), and every e-mail failed in production.
func mailpitSMTP(t *testing.T, mp *testenv.Mailpit, tlsMode, user, password string) *smtp.Provider {
	t.Helper()
	p, err := smtp.New(smtp.Config{
		Host: mp.Host, Port: mp.Port, TLS: tlsMode, CAFile: mp.CAFile,
		Username: user, Password: password, HeloName: "worker-7.shop.example",
		From: "orders@" + mailDomain, IdempotencyHeader: "Idempotency-Key",
		Timeout: 5 * time.Second, MaxIdle: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// sink starts our SMTP sink for the test.
func sink(t *testing.T, cfg smtpsink.Config) *smtpsink.Server {
	t.Helper()
	s, err := smtpsink.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStartTLSAndAuthAgainstMailpit(t *testing.T) {
	t.Parallel()
	mp := testenv.StartMailpit(t, testenv.MailpitOptions{TLS: true, Auth: map[string]string{"shop": "s3cret-pass"}})
	msg := mail.Message{To: "budi@example.com", Subject: "Pesanan", Text: "Terima kasih", MessageID: "tls-1@" + mailDomain, IdempotencyKey: "k1"}
	handOver := func() error { return nil }

	if _, err := mailpitSMTP(t, mp, smtp.TLSStartTLS, "shop", "s3cret-pass").Send(context.Background(), msg, handOver); err != nil {
		t.Fatalf("with STARTTLS and the right password: %v", err)
	}
	if n := mp.CountByMessageID(t, msg.MessageID); n != 1 {
		t.Errorf("%d messages with %s, want 1", n, msg.MessageID)
	}

	// A wrong password is the provider refusing us, not the recipient.
	msg.MessageID = "tls-2@" + mailDomain
	_, err := mailpitSMTP(t, mp, smtp.TLSStartTLS, "shop", "wrong").Send(context.Background(), msg, handOver)
	var se *mail.SendError
	if !errors.As(err, &se) || se.Outcome != mail.OutcomeUnavailable || se.Stage != mail.StageAuth || se.Reply.Code != 535 {
		t.Errorf("wrong password: %v, want unavailable at auth with 535", err)
	}
	// No credentials at all: Mailpit refuses MAIL with 530.
	_, err = mailpitSMTP(t, mp, smtp.TLSStartTLS, "", "").Send(context.Background(), msg, handOver)
	if !errors.As(err, &se) || se.Outcome != mail.OutcomeUnavailable || se.Stage != mail.StageSender || se.Reply.Code != 530 {
		t.Errorf("no credentials: %v, want unavailable at MAIL with 530", err)
	}
	if n := mp.CountByMessageID(t, msg.MessageID); n != 0 {
		t.Errorf("%d messages accepted without the right credentials", n)
	}
}

func TestMailpitRefusalsAreClassifiedByStage(t *testing.T) {
	t.Parallel()
	mp := testenv.StartMailpit(t, testenv.MailpitOptions{Chaos: true, AllowedRecipients: `@example\.com$`})
	p := mailpitSMTP(t, mp, smtp.TLSNone, "", "")
	send := func(to string) *mail.SendError {
		_, err := p.Send(context.Background(), mail.Message{To: to, Subject: "s", Text: "t", MessageID: "c@" + mailDomain, IdempotencyKey: "k"}, func() error { return nil })
		var se *mail.SendError
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("unclassified error %v", err)
		}
		return se
	}
	if se := send("nobody@elsewhere.test"); se == nil || se.Outcome != mail.OutcomePermanent || se.Stage != mail.StageRecipient {
		t.Errorf("refused recipient: %v, want permanent at RCPT", se)
	}
	mp.SetChaos(t, testenv.MailpitChaos{Sender: &testenv.MailpitTrigger{ErrorCode: 550, Probability: 100}})
	if se := send("ana@example.com"); se == nil || se.Outcome != mail.OutcomeUnavailable || se.Stage != mail.StageSender {
		t.Errorf("550 at MAIL FROM: %v, want unavailable at MAIL", se)
	}
	// Refused MAIL FROM (our sender, not the relay's pace): the probe asks
	// MAIL FROM too, the one thing that can tell when that is over.
	if err := p.Probe(context.Background()); err == nil {
		t.Error("the probe passed while MAIL FROM is refused")
	}
	mp.SetChaos(t, testenv.MailpitChaos{Recipient: &testenv.MailpitTrigger{ErrorCode: 451, Probability: 100}})
	if se := send("ana@example.com"); se == nil || se.Outcome != mail.OutcomeTemporary || se.Stage != mail.StageRecipient {
		t.Errorf("451 at RCPT: %v, want temporary at RCPT", se)
	}
	mp.ClearChaos(t)
	if err := p.Probe(context.Background()); err != nil {
		t.Errorf("probe after the chaos ended: %v", err)
	}
	if se := send("ana@example.com"); se != nil {
		t.Errorf("after the chaos ended: %v", se)
	}
	if n := mp.Count(t); n != 1 {
		t.Errorf("%d messages at Mailpit, want 1: a probe must send nothing", n)
	}
}

// SMTP_TLS=starttls means STARTTLS or nothing: a server that does not
// offer it gets no message in clear text.
func TestStartTLSIsRequiredWhenConfigured(t *testing.T) {
	t.Parallel()
	e := struct{ sink *smtpsink.Server }{sink(t, smtpsink.Config{})} // the sink offers no STARTTLS
	p, err := smtp.New(smtp.Config{Host: e.sink.Host(), Port: e.sink.Port(), TLS: smtp.TLSStartTLS,
		From: "orders@shop.example", IdempotencyHeader: "Idempotency-Key", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	_, err = p.Send(context.Background(), mail.Message{To: "x@example.com", Subject: "s", Text: "t", MessageID: "m@shop.example"},
		func() error { t.Error("handOver reached without TLS"); return nil })
	var se *mail.SendError
	if !errors.As(err, &se) || se.Outcome != mail.OutcomeUnavailable || !strings.Contains(err.Error(), "STARTTLS") {
		t.Errorf("err = %v, want the provider unavailable, naming STARTTLS", err)
	}
	if n := e.sink.Count(); n != 0 {
		t.Errorf("%d messages sent in clear text", n)
	}
}

func TestPlainTextOnlyForDevelopmentHosts(t *testing.T) {
	t.Parallel()
	for host, ok := range map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true, "mailhog": true, "mailpit": true,
		"smtp.example.com": false, "10.0.0.5": false} {
		err := smtp.Config{Host: host, Port: 25, TLS: smtp.TLSNone, From: "a@shop.example", IdempotencyHeader: "Idempotency-Key"}.Validate()
		if (err == nil) != ok {
			t.Errorf("TLS none to %s: err = %v", host, err)
		}
	}
}

// Over a provider's SMTP endpoint the key travels in the provider's own
// header: Resend-Idempotency-Key gets the same derived key as Resend's
// HTTP API (no address, at most 256 characters), and a metadata header
// (Postmark's X-PM-Metadata-*) the key's hash, which its look-up searches.
func TestProviderHeadersOverSMTP(t *testing.T) {
	t.Parallel()
	s := sink(t, smtpsink.Config{})
	p, err := smtp.New(smtp.Config{Host: s.Host(), Port: s.Port(), TLS: smtp.TLSNone, From: "orders@" + mailDomain,
		IdempotencyHeader: "Resend-Idempotency-Key", MetadataHeader: "X-PM-Metadata-sekali-key", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	key := "order-confirmation:0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87:ana@example.com"
	if _, err := p.Send(context.Background(), mail.Message{To: "ana@example.com", Subject: "s", Text: "t", MessageID: "h@" + mailDomain, IdempotencyKey: key},
		func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	h := s.Messages()[0].Header
	if got := h.Get("Resend-Idempotency-Key"); got != mail.ProviderKey(key) || strings.Contains(got, "@") || len(got) > 256 {
		t.Errorf("Resend-Idempotency-Key %q", got)
	}
	if got := h.Get("X-Pm-Metadata-Sekali-Key"); got != mail.KeyHash(key) {
		t.Errorf("metadata header %q, want the key hash", got)
	}
}

// By default a message carries no idempotency key: the key names the
// order and the customer's address, and a relay that does not
// deduplicate by it would only pass them on. SMTP_IDEMPOTENCY_HEADER
// names the header of a relay that does (above).
func TestNoIdempotencyHeaderByDefault(t *testing.T) {
	t.Parallel()
	s := sink(t, smtpsink.Config{})
	env := map[string]string{"SMTP_HOST": s.Host(), "SMTP_PORT": strconv.Itoa(s.Port())}
	r := envconfig.New(func(k string) string { return env[k] })
	cfg := smtp.ReadEnv(r, mail.SenderSettings{From: "orders@" + mailDomain})
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	p, done, err := cfg.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(done)
	key := "order-confirmation:0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87:ana@example.com"
	if _, err := p.Send(context.Background(), mail.Message{To: "ana@example.com", Subject: "s", Text: "t", MessageID: "d@" + mailDomain, IdempotencyKey: key},
		func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	msg := s.Messages()[0]
	for name := range msg.Header {
		if strings.Contains(strings.Join(msg.Header[name], " "), "ana@example.com") && name != "To" {
			t.Errorf("header %s carries the key: %q", name, msg.Header[name])
		}
	}
	if got := msg.Header.Get("Idempotency-Key"); got != "" {
		t.Errorf("Idempotency-Key %q by default", got)
	}
}

// A relay's rate reply is throttled: nothing was taken, the hand-over
// never ran, and the reply's text is there for the budget. After 421
// the next send dials afresh; after 451 the kept connection goes on.
func TestRateReplyOfTheRelayIsThrottled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		reply *gosmtp.SMTPError // nil: the sink's 421 4.7.0
		code  int
		conns int // connections after the three sends
	}{
		{"421", nil, 421, 2},
		{"451", &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 7, 1}, Message: "rate limit exceeded, try again later"}, 451, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := sink(t, smtpsink.Config{RateLimit: smtpsink.RateLimit{Messages: 1, Per: time.Hour, Reply: c.reply}})
			p, err := smtp.New(smtp.Config{Host: s.Host(), Port: s.Port(), TLS: smtp.TLSNone, From: "orders@" + mailDomain,
				IdempotencyHeader: "Idempotency-Key", Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			msg := func(n int) mail.Message {
				return mail.Message{To: "ana@example.com", Subject: "s", Text: "t", MessageID: fmt.Sprintf("r%d@%s", n, mailDomain), IdempotencyKey: fmt.Sprint(n)}
			}
			if _, err := p.Send(context.Background(), msg(1), func() error { return nil }); err != nil {
				t.Fatal(err)
			}
			for n := 2; n <= 3; n++ {
				_, err = p.Send(context.Background(), msg(n), func() error { t.Error("handed over past the rate"); return nil })
				var se *mail.SendError
				if !errors.As(err, &se) || se.Outcome != mail.OutcomeThrottled || se.Stage != mail.StageSender || se.Reply.Code != c.code ||
					!strings.HasPrefix(se.Reply.Enhanced, "4.7.") || !strings.Contains(strings.ToLower(se.Reply.Text), "rate limit exceeded") || se.HandedOver {
					t.Errorf("send %d past the rate: %v (reply %+v), want throttled at MAIL with %d 4.7.x and its text", n, err, se.Reply, c.code)
				}
			}
			if s.Count() != 1 || s.RateLimited() != 2 || s.Connections() != c.conns {
				t.Errorf("%d messages, %d refused by rate, %d connections; want 1, 2, %d", s.Count(), s.RateLimited(), s.Connections(), c.conns)
			}
		})
	}
}

// Sends that wait for a connection, at a relay that takes every message,
// grow a worker's connections from two to SMTP_CONNECTIONS and never
// past it: more connections pay where the relay's own rate does not bind.
func TestConnectionsGrowToTheirCapWhileSendsWait(t *testing.T) {
	t.Parallel()
	s := sink(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 5 * time.Millisecond }})
	const limit = 4
	p, err := smtp.New(smtp.Config{Host: s.Host(), Port: s.Port(), TLS: smtp.TLSNone, From: "orders@" + mailDomain,
		Timeout: 5 * time.Second, MaxIdle: 8, Connections: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if bound, _ := p.Connections(); bound != 2 {
		t.Fatalf("a new provider's bound is %d, want 2", bound)
	}
	var wg sync.WaitGroup
	var most atomic.Int32
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				m := mail.Message{To: fmt.Sprintf("g%d-%d@example.com", g, i), Subject: "s", Text: "t", MessageID: fmt.Sprintf("g%d-%d@%s", g, i, mailDomain)}
				if _, err := p.Send(context.Background(), m, func() error { return nil }); err != nil {
					t.Error(err)
					return
				}
				if _, open := p.Connections(); int32(open) > most.Load() {
					most.Store(int32(open))
				}
			}
		})
	}
	wg.Wait()
	if n := len(s.Messages()); n != 160 {
		t.Errorf("%d messages at the sink, want 160", n)
	}
	bound, open := p.Connections()
	if bound != limit || open > limit || most.Load() > limit {
		t.Errorf("bound %d, %d open, at most %d seen open: want the bound grown to SMTP_CONNECTIONS (%d) and never more open", bound, open, most.Load(), limit)
	}
}
