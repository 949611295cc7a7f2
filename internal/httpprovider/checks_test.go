package httpprovider_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

func TestCheckWebhookBody(t *testing.T) {
	t.Parallel()
	if err := httpprovider.CheckWebhookBody(make([]byte, httpprovider.MaxWebhookBody)); err != nil {
		t.Errorf("at the cap: %v", err)
	}
	if err := httpprovider.CheckWebhookBody(make([]byte, httpprovider.MaxWebhookBody+1)); err == nil {
		t.Error("over the cap: accepted")
	}
}

func TestCheckSignedAt(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tol := httpprovider.WebhookTolerance
	for _, d := range []time.Duration{0, tol, -tol, time.Minute} {
		if err := httpprovider.CheckSignedAt(now.Add(d), now, tol); err != nil {
			t.Errorf("signed %s from now: %v", d, err)
		}
	}
	for _, d := range []time.Duration{tol + time.Second, -tol - time.Second, 24 * time.Hour} {
		if err := httpprovider.CheckSignedAt(now.Add(-d), now, tol); err == nil || !strings.Contains(err.Error(), "from now") {
			t.Errorf("signed %s ago: %v, want refused", d, err)
		}
	}
}

var (
	errOutside   = errors.New("outside the retention")
	errTooRecent = errors.New("too recent")
)

func TestCheckRetention(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, at := range []time.Time{{}, now, now.Add(-72 * time.Hour)} {
		if err := httpprovider.CheckRetention(at, now, 72*time.Hour, errOutside); err != nil {
			t.Errorf("handed over at %v: %v", at, err)
		}
	}
	if err := httpprovider.CheckRetention(now.Add(-73*time.Hour), now, 72*time.Hour, errOutside); !errors.Is(err, errOutside) {
		t.Errorf("older than the retention: %v, want errOutside", err)
	}
}

// A miss is believed only for a send whose time is known and older than
// the settle margin.
func TestCheckMiss(t *testing.T) {
	t.Parallel()
	now := time.Now()
	if err := httpprovider.CheckMiss("p", now.Add(-time.Hour), now, 30*time.Minute, errTooRecent); err != nil {
		t.Errorf("settled: %v", err)
	}
	if err := httpprovider.CheckMiss("p", now.Add(-time.Minute), now, 30*time.Minute, errTooRecent); !errors.Is(err, errTooRecent) {
		t.Errorf("within the settle margin: %v, want errTooRecent", err)
	}
	err := httpprovider.CheckMiss("p", time.Time{}, now, 30*time.Minute, errTooRecent)
	if err == nil || errors.Is(err, errTooRecent) || !strings.HasPrefix(err.Error(), "p: not found, but without a hand-over time") {
		t.Errorf("no hand-over time: %v, want an error of its own", err)
	}
}

// A bad recipient fails the delivery for good; any other message that
// cannot be put into a request is our bug, and waits for a fix.
func TestCheckMessageAndComposeError(t *testing.T) {
	t.Parallel()
	m := mail.Message{To: " Budi@Example.com", MessageID: "abc@shop.example", IdempotencyKey: "order-confirmation:1:budi@example.com"}
	if to, err := httpprovider.CheckMessage(m); err != nil || to != "budi@example.com" {
		t.Fatalf("CheckMessage = %q, %v; want budi@example.com", to, err)
	}
	cases := []struct {
		change  func(*mail.Message)
		outcome mail.Outcome
	}{
		{func(m *mail.Message) { m.To = "Budi <budi@example.com>" }, mail.OutcomePermanent},
		{func(m *mail.Message) { m.To = "" }, mail.OutcomePermanent},
		{func(m *mail.Message) { m.MessageID = "<abc@shop.example>" }, mail.OutcomeTemporary},
		{func(m *mail.Message) { m.MessageID = "" }, mail.OutcomeTemporary},
		{func(m *mail.Message) { m.MessageID = "abc.shop.example" }, mail.OutcomeTemporary},
		{func(m *mail.Message) { m.IdempotencyKey = "" }, mail.OutcomeTemporary},
	}
	for i, c := range cases {
		bad := m
		c.change(&bad)
		_, err := httpprovider.CheckMessage(bad)
		if err == nil {
			t.Errorf("case %d: %+v accepted", i, bad)
			continue
		}
		if se := httpprovider.ComposeError(err); se.Outcome != c.outcome || se.HandedOver || !errors.Is(se, err) {
			t.Errorf("case %d: %v, want %s, not handed over", i, se, c.outcome)
		}
	}
}

func TestMentionsField(t *testing.T) {
	t.Parallel()
	for _, msg := range []string{"invalid `to` field", "the 'to' field is invalid", `"to" must be an address`} {
		if !httpprovider.MentionsField(msg, "to") {
			t.Errorf("MentionsField(%q, to) = false", msg)
		}
	}
	for _, msg := range []string{"invalid to field", "the 'reply_to' field", "'from' is invalid"} {
		if httpprovider.MentionsField(msg, "to") {
			t.Errorf("MentionsField(%q, to) = true", msg)
		}
	}
}
