package postmark

import (
	"context"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/postmark/postmarktest"
)

// Each of Postmark's answers about pace, from the stand-in, is
// throttled: nothing taken, no attempt counted, a limit unsaid.
func TestEveryPaceAnswer(t *testing.T) {
	t.Parallel()
	for _, a := range paceAnswers {
		t.Run(a.who, func(t *testing.T) {
			t.Parallel()
			srv := postmarktest.NewServer()
			t.Cleanup(srv.Close)
			p, err := New(Config{Config: httpprovider.Config{Key: srv.Token, From: "orders@shop.example", BaseURL: srv.URL, Timeout: 5 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			srv.FailNext("/email", postmarktest.Fault{Status: a.status, ErrorCode: max(a.errorCode, 429), Message: a.message})
			_, err = p.Send(context.Background(), httpprovidertest.Message(1), httpprovidertest.Pass)
			se := httpprovidertest.SendError(t, err)
			if se.Outcome != mail.OutcomeThrottled || se.Throttle != mail.ThrottleUnsaid || se.Reply.Code != a.status || se.MayHaveAccepted() {
				t.Errorf("%v: %s (throttle %q), want throttled", err, se.Outcome, se.Throttle)
			}
			if n := len(srv.Messages()); n != 0 {
				t.Errorf("%d e-mails taken", n)
			}
		})
	}
}
