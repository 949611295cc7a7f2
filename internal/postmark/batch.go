package postmark

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// MaxBatch is the most messages one POST /email/batch takes.
const MaxBatch = 500

// MaxBatch implements mail.Batcher.
func (p *Provider) MaxBatch() int { return MaxBatch }

// SendBatch implements mail.Batcher: one POST /email/batch
// (https://postmarkapp.com/developer/user-guide/send-email-with-api/batch-emails)
// of b's messages, each the e-mail a single send would post. Postmark
// takes no key (b.Key is not sent): a batch whose answer is lost, or
// answered 5xx, is ambiguous for every member, and the reconciler
// settles each by the look-up, by the metadata every message carries.
//
// Postmark answers 200 with one result per message, in order: its
// MessageID, or its ErrorCode and Message, classified as the single
// send's refusal with that code would be (406, an inactive recipient,
// is permanent), the others sent all the same. A result with ErrorCode 0
// and no MessageID is ambiguous for that member alone; an answer that is
// not one result per message is ambiguous for all. A message that cannot
// be put into a request is left out of it, with
// httpprovider.ComposeError's error as its result.
func (p *Provider) SendBatch(ctx context.Context, b mail.Batch, handOver func() error) ([]mail.BatchResult, error) {
	if len(b.Messages) == 0 || len(b.Messages) > MaxBatch {
		return nil, httpprovider.ComposeError(fmt.Errorf("a batch of %d messages: want 1 to %d", len(b.Messages), MaxBatch))
	}
	results, emails, in := httpprovider.ComposeBatch(b.Messages, p.email) // in[k]: the index in b of the request's k-th e-mail
	if len(emails) == 0 {
		return results, nil
	}
	ans, se := p.client.PostJSON(ctx, handOver, "/email/batch", nil, emails)
	if se != nil {
		return nil, se
	}
	var answers []sendAnswer
	decodeErr := json.Unmarshal(ans.Body, &answers)
	if ans.Status != http.StatusOK {
		var a sendAnswer
		jsonBody := json.Unmarshal(ans.Body, &a) == nil
		return nil, httpprovider.Refused(classify(ans.Status, a.ErrorCode, a.Message, jsonBody), ans)
	}
	if decodeErr != nil || len(answers) != len(emails) {
		return nil, noID(ans, fmt.Sprintf(" for each of the batch's %d messages", len(emails)))
	}
	for k, i := range in {
		switch a := answers[k]; {
		case a.ErrorCode == 0 && a.MessageID != "":
			results[i].ID = a.MessageID
		case a.ErrorCode == 0:
			results[i].Err = noID(ans, fmt.Sprintf(" for message %d of the batch", k))
		default:
			se := classify(ans.Status, a.ErrorCode, a.Message, true)
			se.Err = fmt.Errorf("postmark refused message %d of the batch, ErrorCode %d: %s", k, a.ErrorCode, a.Message)
			results[i].Err = httpprovider.Refused(se, ans)
		}
	}
	return results, nil
}
