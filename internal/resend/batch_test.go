package resend_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/resend"
	"github.com/sekali-dev/sekali/internal/resend/resendtest"
)

var _ mail.Batcher = (*resend.Provider)(nil)

// batchOf is a batch of n deliveries to budi1@…, budi2@…, under a key of
// its own.
func batchOf(n int) mail.Batch {
	b := mail.Batch{Key: fmt.Sprintf("batch:%s:%d", message(1).IdempotencyKey, n)}
	for i := range n {
		m := message(i + 1)
		m.To = fmt.Sprintf("budi%d@example.com", i+1)
		m.IdempotencyKey += fmt.Sprintf(":%d", i+1)
		m.MessageID = mail.MessageID(m.IdempotencyKey, "shop.example")
		b.Messages = append(b.Messages, m)
	}
	return b
}

func sendBatch(t *testing.T, p *resend.Provider, b mail.Batch) []mail.BatchResult {
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

// A batch is one request under the batch's key, its e-mails those the
// single send would post, answered with one id each, in order.
func TestBatchIsOneRequestOfTheSingleSendsEmails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	batch := batchOf(3)
	results := sendBatch(t, b.p, batch)
	msgs := b.srv.Messages()
	if c := b.srv.Counts(); c.Batches != 1 || c.Emails != 0 || len(msgs) != 3 {
		t.Fatalf("counts %+v, %d e-mails; want one batch request of 3", c, len(msgs))
	}
	// The same messages one by one, at another server: the same e-mails.
	alone := setup(t)
	for i, m := range batch.Messages {
		if results[i].Err != nil || results[i].ID != msgs[i].ID {
			t.Errorf("result %d: %+v, want the id %s", i, results[i], msgs[i].ID)
		}
		if _, err := alone.p.Send(context.Background(), m, httpprovidertest.Pass); err != nil {
			t.Fatal(err)
		}
		got, want := msgs[i], alone.srv.Messages()[i]
		if !got.Batched || got.IdempotencyKey != resend.IdempotencyKey(batch.Key) {
			t.Errorf("e-mail %d: batched %v under %q, want the batch's key %q", i, got.Batched, got.IdempotencyKey, resend.IdempotencyKey(batch.Key))
		}
		got.ID, got.SentAt, got.IdempotencyKey, got.Batched = "", time.Time{}, "", false
		want.ID, want.SentAt, want.IdempotencyKey = "", time.Time{}, ""
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("e-mail %d in the batch:\n%+v\nalone:\n%+v", i, got, want)
		}
	}
}

// The answer is lost after Resend sent the batch: every member may have
// been taken (ambiguous); the same batch again under its key gets the
// first ids and sends nothing again.
func TestBatchResentAfterALostAnswerIsTheFirstIDs(t *testing.T) {
	t.Parallel()
	for _, sent := range []bool{true, false} {
		b := setup(t)
		batch := batchOf(3)
		b.srv.BatchFailNext(resendtest.Fault{Cut: true, Sent: sent})
		results, err := b.p.SendBatch(context.Background(), batch, httpprovidertest.Pass)
		se := httpprovidertest.SendError(t, err)
		if results != nil || se.Outcome != mail.OutcomeAmbiguous || !se.HandedOver || !se.MayHaveAccepted() {
			t.Fatalf("sent=%v: cut after the request: %v, %v; want ambiguous, handed over, no results", sent, results, err)
		}
		again := sendBatch(t, b.p, batch)
		msgs := b.srv.Messages()
		if len(msgs) != 3 || b.srv.Counts().Batches != 2 {
			t.Fatalf("sent=%v: %d e-mails after %d requests, want 3 after 2", sent, len(msgs), b.srv.Counts().Batches)
		}
		for i, r := range again {
			if r.Err != nil || r.ID != msgs[i].ID {
				t.Errorf("sent=%v: result %d: %+v, want %s", sent, i, r, msgs[i].ID)
			}
		}
	}
}

// A member Resend refuses is refused alone, as the single send's refusal
// would be (a bad to: permanent); the others are sent. A member we
// cannot put into a request is left out of it.
func TestBatchMemberRefusedAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	batch := batchOf(4)
	b.srv.RefuseRecipients(batch.Messages[1].To)
	batch.Messages[3].To = "not an address"
	results := sendBatch(t, b.p, batch)
	if se := results[1].Err; se == nil || se.Outcome != mail.OutcomePermanent || se.Stage != mail.StageRecipient || !se.HandedOver || se.MayHaveAccepted() ||
		!strings.Contains(se.Error(), "`to`") {
		t.Errorf("refused member: %+v, want permanent at recipient, saying why", se)
	}
	if se := results[3].Err; se == nil || se.Outcome != mail.OutcomePermanent || se.HandedOver || !errors.Is(se, mail.ErrInvalidAddress) {
		t.Errorf("member without an address: %+v, want permanent, not handed over", se)
	}
	msgs := b.srv.Messages()
	if len(msgs) != 2 || results[0].ID != msgs[0].ID || results[2].ID != msgs[1].ID || results[0].Err != nil || results[2].Err != nil {
		t.Errorf("results %+v, sent %d; want the first and third sent with their ids", results, len(msgs))
	}
	// Sent again (the worker's retry of the same composition): the same
	// body, the first answer.
	again := sendBatch(t, b.p, batch)
	if again[0].ID != results[0].ID || again[2].ID != results[2].ID || again[1].Err == nil || len(b.srv.Messages()) != 2 {
		t.Errorf("again: %+v, %d e-mails; want the first answer", again, len(b.srv.Messages()))
	}
}

// Beyond the rate limit a batch is throttled, one request like any
// other, with the answer's headers for the budget; nothing was taken.
func TestBatchThrottledWithItsHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetRateLimit(1)
	if _, err := b.p.Send(context.Background(), message(9), httpprovidertest.Pass); err != nil {
		t.Fatal(err)
	}
	results, err := b.p.SendBatch(context.Background(), batchOf(3), httpprovidertest.Pass)
	se := httpprovidertest.SendError(t, err)
	if results != nil || se.Outcome != mail.OutcomeThrottled || se.Reply.Code != 429 || se.MayHaveAccepted() || se.Pause != 0 ||
		se.Header.Get("Retry-After") != "1" || se.Header.Get("Ratelimit-Limit") != "1" || se.Header.Get("Ratelimit-Remaining") != "0" {
		t.Errorf("over the rate: %v (header %v), want throttled 429 with retry-after and ratelimit-*", err, se.Header)
	}
	if n := len(b.srv.Messages()); n != 1 {
		t.Errorf("%d e-mails, want only the first send's", n)
	}
}

// The whole request's failures are a single send's.
func TestBatchRequestFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.BatchFailNext(resendtest.Fault{Status: 503, Name: "service_unavailable", Message: "API is temporarily unavailable"},
		resendtest.Fault{Status: 429, Name: "daily_quota_exceeded", Message: "You have reached your daily email quota."})
	_, err := b.p.SendBatch(context.Background(), batchOf(2), httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeUnavailable || !se.MayHaveAccepted() || se.Stage != mail.StageData {
		t.Errorf("503: %v, want unavailable, may have accepted, at data", err)
	}
	_, err = b.p.SendBatch(context.Background(), batchOf(2), httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeThrottled || se.Throttle != mail.ThrottleQuota || se.Pause <= 0 || se.MayHaveAccepted() {
		t.Errorf("daily quota: %v, want throttled with a pause", err)
	}
	_, err = b.p.SendBatch(context.Background(), mail.Batch{Key: "k"}, httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeTemporary || b.srv.Counts().Batches != 2 {
		t.Errorf("an empty batch: %v, want temporary (our bug), unsent", err)
	}
	if n := len(b.srv.Messages()); n != 0 {
		t.Errorf("%d e-mails sent", n)
	}
}

// The hand-over rules hold for a batch as for one message: refused,
// nothing goes; stalled past the deadline, nothing goes.
func TestBatchHandOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	batches := func() int { return b.srv.Counts().Batches }
	httpprovidertest.RefusedBatchHandOverSendsNothing(t, b.p, batchOf(2), batches)
	p := provider(t, b.srv, b.srv.SendingOnlyKey, 100*time.Millisecond)
	httpprovidertest.StallAfterBatchHandOverSendsNothing(t, p, batchOf(2), 200*time.Millisecond, batches)
}

// Every answer's pace reaches the caller's observer, a success's
// included: Resend announces its limit on each, and the 429 it spares
// shows first as ratelimit-remaining 0.
func TestAnswersAreObserved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetRateLimit(2)
	var seen []string
	ctx := mail.WithAnswerObserver(context.Background(), func(status int, h http.Header) {
		seen = append(seen, fmt.Sprintf("%d %s/%s", status, h.Get("Ratelimit-Remaining"), h.Get("Ratelimit-Limit")))
	})
	if _, err := b.p.Send(ctx, message(1), httpprovidertest.Pass); err != nil {
		t.Fatal(err)
	}
	if _, err := b.p.SendBatch(ctx, batchOf(2), httpprovidertest.Pass); err != nil {
		t.Fatal(err)
	}
	if _, err := b.p.SendBatch(ctx, batchOf(3), httpprovidertest.Pass); err == nil {
		t.Fatal("a third request within the second was let through")
	}
	if want := []string{"200 1/2", "200 0/2", "429 0/2"}; !slices.Equal(seen, want) {
		t.Errorf("observed %q, want %q", seen, want)
	}
}
