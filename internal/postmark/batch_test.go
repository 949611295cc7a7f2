package postmark_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/postmark"
	"github.com/sekali-dev/sekali/internal/postmark/postmarktest"
)

var _ mail.Batcher = (*postmark.Provider)(nil)

// batchOf is a batch of n deliveries to budi1@…, budi2@…
func batchOf(n int) mail.Batch {
	b := mail.Batch{Key: fmt.Sprintf("batch:%d", n)}
	for i := range n {
		m := httpprovidertest.Message(20 + i)
		m.To = fmt.Sprintf("budi%d@example.com", i+1)
		b.Messages = append(b.Messages, m)
	}
	return b
}

func sendBatch(t *testing.T, p *postmark.Provider, b mail.Batch) []mail.BatchResult {
	t.Helper()
	results, err := p.SendBatch(context.Background(), b, httpprovidertest.Pass)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(b.Messages) {
		t.Fatalf("%d results for %d messages", len(results), len(b.Messages))
	}
	return results
}

// A batch is one request of the messages the single send would post,
// answered with one MessageID each, in order.
func TestBatchIsOneRequestOfTheSingleSendsMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	batch := batchOf(3)
	results := sendBatch(t, b.p, batch)
	msgs := b.srv.Messages()
	if b.srv.Requests("/email/batch") != 1 || b.srv.Requests("/email") != 0 || len(msgs) != 3 {
		t.Fatalf("%d batch requests, %d single, %d e-mails; want one batch of 3", b.srv.Requests("/email/batch"), b.srv.Requests("/email"), len(msgs))
	}
	alone := setup(t)
	for i, m := range batch.Messages {
		if results[i].Err != nil || results[i].ID != msgs[i].MessageID {
			t.Errorf("result %d: %+v, want %s", i, results[i], msgs[i].MessageID)
		}
		if _, err := alone.p.Send(context.Background(), m, httpprovidertest.Pass); err != nil {
			t.Fatal(err)
		}
		got, want := msgs[i], alone.srv.Messages()[i]
		got.MessageID, got.ReceivedAt, want.MessageID, want.ReceivedAt = "", time.Time{}, "", time.Time{}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("message %d in the batch:\n%+v\nalone:\n%+v", i, got, want)
		}
	}
}

// Postmark takes no key: a batch whose answer is lost is ambiguous for
// every member, and each is settled by the look-up, found if it was
// sent and not if it was not.
func TestBatchWithALostAnswerIsSettledByTheLookup(t *testing.T) {
	t.Parallel()
	for _, sent := range []bool{true, false} {
		b := setup(t)
		batch := batchOf(3)
		b.srv.FailNext("/email/batch", postmarktest.Fault{Cut: true, Sent: sent})
		results, err := b.p.SendBatch(context.Background(), batch, httpprovidertest.Pass)
		se := httpprovidertest.SendError(t, err)
		if results != nil || se.Outcome != mail.OutcomeAmbiguous || !se.HandedOver || !se.MayHaveAccepted() {
			t.Fatalf("sent=%v: cut after the request: %v, %v; want ambiguous for all, handed over", sent, results, err)
		}
		for i, m := range batch.Messages {
			id, found, err := b.l.Find(context.Background(), httpprovidertest.Query(m, time.Now().Add(-2*time.Minute)))
			if err != nil || found != sent || (sent && id != b.srv.Messages()[i].MessageID) {
				t.Errorf("sent=%v: member %d: Find = %q, %v, %v", sent, i, id, found, err)
			}
		}
	}
}

// A member Postmark refuses (an inactive recipient, 406) is refused
// alone and for good; the others are sent.
func TestBatchMemberRefusedAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	batch := batchOf(3)
	b.srv.Deactivate(batch.Messages[1].To)
	results := sendBatch(t, b.p, batch)
	if se := results[1].Err; se == nil || se.Outcome != mail.OutcomePermanent || se.Stage != mail.StageRecipient || !se.HandedOver || se.MayHaveAccepted() {
		t.Errorf("inactive member: %+v, want permanent at recipient", se)
	}
	msgs := b.srv.Messages()
	if len(msgs) != 2 || results[0].ID != msgs[0].MessageID || results[2].ID != msgs[1].MessageID {
		t.Errorf("results %+v, %d sent; want the first and third sent with their ids", results, len(msgs))
	}
}

// Beyond the rate limit a batch is throttled, one request like any
// other, and nothing was taken; a 5xx is ambiguous for every member.
func TestBatchRequestFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetRateLimit(1)
	sendBatch(t, b.p, batchOf(2))
	_, err := b.p.SendBatch(context.Background(), batchOf(2), httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeThrottled || se.Reply.Code != 429 || se.MayHaveAccepted() {
		t.Errorf("over the rate: %v, want throttled 429", err)
	}
	if n, refused := len(b.srv.Messages()), b.srv.RateLimited(); n != 2 || refused != 1 {
		t.Errorf("%d e-mails, %d refused by rate; want 2 and 1", n, refused)
	}
	b.srv.SetRateLimit(0)
	b.srv.FailNext("/email/batch", postmarktest.Fault{Status: 500, Message: "Internal Server Error"})
	_, err = b.p.SendBatch(context.Background(), batchOf(2), httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeAmbiguous || !se.MayHaveAccepted() {
		t.Errorf("500: %v, want ambiguous for every member", err)
	}
}

func TestBatchHandOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	batches := func() int { return b.srv.Requests("/email/batch") }
	httpprovidertest.RefusedBatchHandOverSendsNothing(t, b.p, batchOf(2), batches)
	p := provider(t, b.srv, b.srv.Token, 100*time.Millisecond)
	httpprovidertest.StallAfterBatchHandOverSendsNothing(t, p, batchOf(2), 200*time.Millisecond, batches)
}
