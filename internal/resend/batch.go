package resend

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// MaxBatch is the most e-mails one POST /emails/batch takes.
const MaxBatch = 100

// MaxBatch implements mail.Batcher.
func (p *Provider) MaxBatch() int { return MaxBatch }

// batchAnswer is Resend's answer to POST /emails/batch in permissive
// validation (https://resend.com/docs/dashboard/emails/batch-validation-modes):
// the ids of the e-mails it created, in the order of the request, and
// the index and reason of each it refused.
type batchAnswer struct {
	Data []struct {
		ID string `json:"id"`
	} `json:"data"`
	Errors []struct {
		Index   int    `json:"index"`
		Message string `json:"message"`
	} `json:"errors"`
}

// SendBatch implements mail.Batcher: one POST /emails/batch of b's
// messages, each the e-mail a single send would post, under the
// Idempotency-Key IdempotencyKey(b.Key), with x-batch-validation:
// permissive, so that an e-mail Resend refuses does not refuse the
// others. The same b gives the same body: sent again under its key
// within DedupWindow it gets the first answer and sends nothing again.
//
// A message that cannot be put into a request (httpprovider.ComposeError:
// a bad address is permanent) is left out of it, with that error as its
// result; the same b leaves out the same messages, so the body stays the
// same. When every message is left out nothing is sent.
//
// The request's failures are a single send's: no answer after it was
// written is ambiguous (Resend may have taken every e-mail, and the same
// batch again under the key settles it), a 429 throttled, a 5xx
// unavailable and may-have-accepted. An answer that does not account for
// every e-mail is ambiguous for the whole batch. An e-mail refused in
// the answer is classified as the single send's refusal with that
// message would be: a bad to is permanent.
func (p *Provider) SendBatch(ctx context.Context, b mail.Batch, handOver func() error) ([]mail.BatchResult, error) {
	if len(b.Messages) == 0 || len(b.Messages) > MaxBatch || b.Key == "" {
		return nil, httpprovider.ComposeError(fmt.Errorf("a batch of %d messages under key %q: want 1 to %d, under a key", len(b.Messages), b.Key, MaxBatch))
	}
	results, emails, in := httpprovider.ComposeBatch(b.Messages, p.email) // in[k]: the index in b of the request's k-th e-mail
	if len(emails) == 0 {
		return results, nil
	}
	header := http.Header{
		"Idempotency-Key":    {IdempotencyKey(b.Key)},
		"X-Batch-Validation": {"permissive"},
	}
	ans, se := p.client.PostJSON(ctx, handOver, "/emails/batch", header, emails)
	if se != nil {
		return nil, se
	}
	if ans.Status/100 != 2 {
		return nil, httpprovider.Refused(classify(ans.Status, decodeError(ans.Body)), ans)
	}
	var a batchAnswer
	refused, ok := map[int]string{}, json.Unmarshal(ans.Body, &a) == nil && len(a.Data)+len(a.Errors) == len(emails)
	for _, e := range a.Errors {
		_, twice := refused[e.Index]
		ok = ok && e.Index >= 0 && e.Index < len(emails) && !twice
		refused[e.Index] = e.Message
	}
	for _, d := range a.Data {
		ok = ok && d.ID != ""
	}
	if !ok {
		// Taken, most likely, but we cannot tell which id is whose: the
		// same batch again under the key gets this answer again, so
		// leave it to the reconciler, as a single send without an id.
		return nil, &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Reply: mail.HTTPStatus(ans.Status), HandedOver: true, Header: ans.Header,
			Err: fmt.Errorf("answer %d to a batch of %d that does not say what became of each: %q", ans.Status, len(emails), httpprovider.Truncate(ans.Body))}
	}
	next := 0
	for k, i := range in {
		if msg, no := refused[k]; no {
			se := classify(ans.Status, apiError{Message: msg})
			se.Err = fmt.Errorf("resend refused e-mail %d of the batch: %s", k, msg)
			results[i].Err = httpprovider.Refused(se, ans)
			continue
		}
		results[i].ID = a.Data[next].ID
		next++
	}
	return results, nil
}
