package mailgun

import (
	"context"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailgun/mailguntest"
)

func paceProvider(t *testing.T) (*mailguntest.Server, *Provider) {
	t.Helper()
	srv := mailguntest.NewServer("mg.shop.example")
	t.Cleanup(srv.Close)
	p, err := New(Config{Config: httpprovider.Config{Key: srv.APIKey, From: "orders@shop.example", BaseURL: srv.URL, Timeout: 5 * time.Second}, Domain: srv.Domain})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return srv, p
}

// Each of Mailgun's answers about pace, from the stand-in, is throttled
// with the limit it names: nothing taken, no attempt counted.
func TestEveryPaceAnswer(t *testing.T) {
	t.Parallel()
	for _, a := range paceAnswers {
		t.Run(a.message, func(t *testing.T) {
			t.Parallel()
			srv, p := paceProvider(t)
			srv.FailNext("messages", mailguntest.Fault{Status: a.status, Message: a.message})
			_, err := p.Send(context.Background(), httpprovidertest.Message(1), httpprovidertest.Pass)
			se := httpprovidertest.SendError(t, err)
			if se.Outcome != mail.OutcomeThrottled || se.Throttle != a.throttle || se.Reply.Code != a.status || se.MayHaveAccepted() {
				t.Errorf("%v: %s (throttle %q), want throttled for %q (%s)", err, se.Outcome, se.Throttle, a.throttle, a.who)
			}
		})
	}
}

// A domain's recipient limit (420), as the stand-in answers it: a pace
// until the time it names, not a temporary failure of the message.
func TestRecipientLimitOfTheDomainIsThrottledUntilItsTime(t *testing.T) {
	t.Parallel()
	srv, p := paceProvider(t)
	srv.SetRecipientLimit(1, time.Hour)
	if _, err := p.Send(context.Background(), httpprovidertest.Message(1), httpprovidertest.Pass); err != nil {
		t.Fatal(err)
	}
	_, err := p.Send(context.Background(), httpprovidertest.Message(2), httpprovidertest.Pass)
	se := httpprovidertest.SendError(t, err)
	if se.Outcome != mail.OutcomeThrottled || se.Throttle != mail.ThrottleMessages || se.Reply.Code != 420 ||
		se.Pause < 59*time.Minute || se.Pause > 61*time.Minute {
		t.Errorf("past the recipient limit: %v (throttle %q, pause %s), want throttled for messages, pausing about an hour", err, se.Throttle, se.Pause)
	}
	if n := len(srv.Messages()); n != 1 || srv.RecipientLimited() != 1 {
		t.Errorf("%d messages, %d refused; want 1 and 1", n, srv.RecipientLimited())
	}
}
