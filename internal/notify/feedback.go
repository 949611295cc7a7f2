package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/textrule"
)

// ErrUnknownMessage is returned for a provider event that names no
// delivery of this service.
var ErrUnknownMessage = errors.New("notify: the event names no delivery of this service")

// ErrSuppressionNotFound is returned when the recipient is not suppressed.
var ErrSuppressionNotFound = errors.New("notify: the recipient is not on the suppression list")

// FeedbackOutcome says what an event changed.
type FeedbackOutcome struct {
	DeliveryID uuid.UUID
	Duplicate  bool // this provider sent this event before: nothing changed
	Suppressed bool // the recipient was put on the suppression list
	Settled    bool // the delivery was in doubt, and the report settled it as sent
}

// RecordFeedback writes one verified provider event, in one transaction:
// into the history of the delivery it is about, as the delivery's last
// report (delivered, deferred, bounced, complained: Delivery.ProviderEvent)
// unless a later one by the provider's clock is there — and such a report
// settles a delivery in doubt that no attempt is sending as sent (the
// provider took it: SettleByReport) —, and, for a hard
// bounce or a complaint, the recipient onto the suppression list (test
// mode's, for a test delivery: only the test provider reports about
// those), for an unsubscribe off the subscription mail. The delivery is
// the one of the provider's id for the message or of our Message-ID, else
// the one of the key hash echoed from our metadata. The same event
// again (by provider and event id) changes nothing; an event that names
// no delivery of this service is ErrUnknownMessage and changes nothing.
func RecordFeedback(ctx context.Context, db *pgxpool.Pool, f mail.Feedback) (FeedbackOutcome, error) {
	var out FeedbackOutcome
	// The provider's strings as a text column takes them: a NUL or bad
	// UTF-8 in a bounce's diagnostic (passed on from a remote server)
	// would fail the transaction, and the provider would retry the event
	// for ever without the recipient ever being suppressed.
	for _, s := range []*string{&f.ProviderMessageID, &f.MessageID, &f.KeyHash, &f.EventID, &f.Detail} {
		*s = textrule.Clip(*s, 1000)
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		var pid, mid *string
		if f.ProviderMessageID != "" {
			pid = &f.ProviderMessageID
		}
		if f.MessageID != "" {
			mid = &f.MessageID
		}
		if pid == nil && mid == nil && f.KeyHash == "" {
			return ErrUnknownMessage
		}
		d, err := q.FindDeliveryForFeedback(ctx, dbsqlc.FindDeliveryForFeedbackParams{ProviderMessageID: pid, MessageID: mid})
		if errors.Is(err, pgx.ErrNoRows) && f.KeyHash != "" {
			// The provider's id was never stored (the answer that carried
			// it was lost) and it does not echo our Message-ID, but it
			// does echo our metadata.
			d, err = q.FindDeliveryForFeedbackByKeyHash(ctx, f.KeyHash)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrUnknownMessage
		}
		if err != nil {
			return fmt.Errorf("find the delivery of a %s event: %w", f.Provider, err)
		}
		// Test mode's provider reports only about test deliveries, and a
		// real provider never had one: either way the event names no
		// message that provider was given.
		if d.Test != (f.Provider == mail.TestProvider) {
			return ErrUnknownMessage
		}
		out.DeliveryID = d.ID
		n, err := q.InsertProviderEvent(ctx, dbsqlc.InsertProviderEventParams{Provider: f.Provider, EventID: f.EventID, Kind: string(f.Kind), DeliveryID: &d.ID})
		if err != nil {
			return fmt.Errorf("record %s event %s: %w", f.Provider, f.EventID, err)
		}
		if n == 0 {
			out.Duplicate = true
			return nil
		}
		detail := map[string]string{"provider": f.Provider, "event_id": f.EventID, "detail": f.Detail,
			"at": f.At.UTC().Format(time.RFC3339)}
		if err := recordEvent(ctx, q, d, string(f.Kind), f.Provider, detail); err != nil {
			return fmt.Errorf("record %s event in the history: %w", f.Provider, err)
		}
		if slices.Contains(ProviderEventKinds, f.Kind) {
			at := f.At
			if at.IsZero() {
				at = time.Now()
			}
			if err := q.RecordProviderEvent(ctx, dbsqlc.RecordProviderEventParams{ID: d.ID, Kind: string(f.Kind), At: at}); err != nil {
				return fmt.Errorf("record %s event as delivery %s's last: %w", f.Provider, d.ID, err)
			}
			// A report about the message says the provider took it: a
			// delivery in doubt is settled as sent.
			n, err := q.SettleByReport(ctx, dbsqlc.SettleByReportParams{ID: d.ID, ProviderMessageID: providerIDText(f.ProviderMessageID),
				Kind: string(f.Kind), Actor: f.Provider})
			if err != nil {
				return fmt.Errorf("settle delivery %s by %s's report: %w", d.ID, f.Provider, err)
			}
			out.Settled = n == 1
		}
		if f.Kind == mail.FeedbackUnsubscribed {
			// As our one-click link does (Operator.Unsubscribe): the
			// recipient leaves the subscription mail, never an order's.
			if _, err := q.AddUnsubscribe(ctx, dbsqlc.AddUnsubscribeParams{Recipient: d.Recipient, Category: mailtemplate.CategorySubscription, Test: d.Test}); err != nil {
				return fmt.Errorf("unsubscribe the recipient of delivery %s: %w", d.ID, err)
			}
			return nil
		}
		source := map[mail.FeedbackKind]string{mail.FeedbackBounced: "bounce", mail.FeedbackComplained: "complaint"}[f.Kind]
		if source == "" {
			return nil
		}
		reason := fmt.Sprintf("%s reported a %s for delivery %s", f.Provider, source, d.ID)
		if f.Detail != "" {
			reason += ": " + textrule.Clip(f.Detail, 500)
		}
		if _, err := q.AddSuppression(ctx, dbsqlc.AddSuppressionParams{Recipient: d.Recipient, Source: source, Reason: reason, Actor: f.Provider, Test: d.Test}); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("suppress the recipient of delivery %s: %w", d.ID, err)
		}
		out.Suppressed = true
		return nil
	})
	return out, err
}

// TestFeedbackDue lists, oldest first and at most limit, the test
// deliveries the test provider took in the last day for a magic
// recipient (a local part of localParts, before any +label, at
// mail.TestDomain) whose event (eventPrefix and the delivery's id) is
// not recorded yet: what the reconciler reports through RecordFeedback.
func TestFeedbackDue(ctx context.Context, db DB, localParts []string, eventPrefix string, limit int) ([]TestSent, error) {
	rows, err := dbsqlc.New(db).ListTestFeedbackDue(ctx, dbsqlc.ListTestFeedbackDueParams{
		Domain: mail.TestDomain, LocalParts: localParts, EventPrefix: eventPrefix, MaxRows: int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("list the test provider's feedback: %w", err)
	}
	out := make([]TestSent, len(rows))
	for i, r := range rows {
		out[i] = TestSent{DeliveryID: r.ID, Recipient: r.Recipient}
		if r.MessageID != nil {
			out[i].MessageID = *r.MessageID
		}
		if r.ProviderMessageID != nil {
			out[i].ProviderMessageID = *r.ProviderMessageID
		}
	}
	return out, nil
}

// TestSent is a test delivery the test provider took (TestFeedbackDue).
type TestSent struct {
	DeliveryID        uuid.UUID
	Recipient         string
	MessageID         string
	ProviderMessageID string
}

// RememberWebhookToken records the token of a verified webhook signature
// that does not cover the event it came with (Mailgun's covers a
// timestamp and a random token), to refuse the token the next time: a
// captured signature could otherwise carry a forged event until it is
// too old to be accepted. expires is when the verifier starts refusing
// the signature as too old; the row is pruned a while after. A token
// seen before is mail.ErrWebhookReplay and records nothing. A provider's
// retry is no replay: Mailgun retries five minutes later at the
// earliest, when the first signature is too old, so each attempt comes
// signed afresh.
func RememberWebhookToken(ctx context.Context, db *pgxpool.Pool, provider, token string, expires time.Time) error {
	n, err := dbsqlc.New(db).RememberWebhookToken(ctx, dbsqlc.RememberWebhookTokenParams{Provider: provider, Token: token, ExpiresAt: expires})
	if err != nil {
		return fmt.Errorf("remember a %s webhook token: %w", provider, err)
	}
	if n == 0 {
		return mail.ErrWebhookReplay
	}
	return nil
}

// Suppression is one address the service does not send to: live
// deliveries, or with Test, test mode's (docs/testmode.md). A delivery
// meets only its mode's entries; an address has one, of the mode that
// listed it first.
type Suppression struct {
	Recipient string    `json:"recipient"`
	Source    string    `json:"source"` // bounce, complaint or operator
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
	Test      bool      `json:"test,omitempty"` // test mode's list: the test provider's report about a test delivery
}

// SuppressionEvent is one change of the list, for the record.
type SuppressionEvent struct {
	At     time.Time `json:"at"`
	Action string    `json:"action"` // added or removed
	Source string    `json:"source"`
	Actor  string    `json:"actor"`
	Note   string    `json:"note"`
	Test   bool      `json:"test,omitempty"` // of test mode's list
}

// DeleteOldTestSuppressions lifts test mode's suppressions (and
// unsubscribes) older than retention, with their history: the test
// retention. No live entry is ever touched.
func DeleteOldTestSuppressions(ctx context.Context, db DB, retention time.Duration) (int, error) {
	n, err := dbsqlc.New(db).DeleteOldTestSuppressions(ctx, retention.Seconds())
	if err != nil {
		return 0, fmt.Errorf("delete old test suppressions: %w", err)
	}
	return int(n), nil
}
