package ses

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
)

// TagKey names the SES message tag that would carry
// mail.KeyHash(IdempotencyKey) (SES publishes tags with event
// publishing through a configuration set).
const TagKey = "sekali-key"

// record is an SES event record (eventType, event publishing) or
// notification (notificationType)
// (https://docs.aws.amazon.com/ses/latest/dg/event-publishing-retrieving-sns-contents.html).
type record struct {
	EventType        string `json:"eventType"`
	NotificationType string `json:"notificationType"`
	Mail             struct {
		MessageID     string              `json:"messageId"` // SES's id
		Tags          map[string][]string `json:"tags"`
		CommonHeaders struct {
			MessageID string `json:"messageId"` // the original Message-ID
		} `json:"commonHeaders"`
	} `json:"mail"`
	Bounce *struct {
		BounceType        string `json:"bounceType"` // Permanent, Transient, Undetermined
		BounceSubType     string `json:"bounceSubType"`
		Timestamp         string `json:"timestamp"`
		BouncedRecipients []struct {
			EmailAddress   string `json:"emailAddress"`
			DiagnosticCode string `json:"diagnosticCode"`
		} `json:"bouncedRecipients"`
	} `json:"bounce"`
	Complaint *struct {
		Timestamp            string `json:"timestamp"`
		ComplaintFeedback    string `json:"complaintFeedbackType"`
		ComplainedRecipients []struct {
			EmailAddress string `json:"emailAddress"`
		} `json:"complainedRecipients"`
	} `json:"complaint"`
	Delivery *struct {
		Timestamp    string   `json:"timestamp"`
		Recipients   []string `json:"recipients"`
		SMTPResponse string   `json:"smtpResponse"`
	} `json:"delivery"`
	DeliveryDelay *struct {
		Timestamp         string `json:"timestamp"`
		DelayType         string `json:"delayType"`
		DelayedRecipients []struct {
			EmailAddress   string `json:"emailAddress"`
			DiagnosticCode string `json:"diagnosticCode"`
		} `json:"delayedRecipients"`
	} `json:"deliveryDelay"`
}

type recipient struct{ address, detail string }

// feedback turns one SES record into one Feedback per recipient.
// eventID is the SNS MessageId, the same when SNS retries.
func feedback(eventID, body string) ([]mail.Feedback, error) {
	var r record
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return nil, fmt.Errorf("%w: Message is not an SES record: %w", mail.ErrMalformed, err)
	}
	typ := r.EventType
	if typ == "" {
		typ = r.NotificationType
	}
	var (
		kind mail.FeedbackKind
		at   string
		to   []recipient
	)
	switch {
	case typ == "Bounce" && r.Bounce != nil:
		// Only a permanent bounce says the address is dead; SES will not
		// retry a transient one either, but the address may work later.
		kind = mail.FeedbackDeferred
		if r.Bounce.BounceType == "Permanent" {
			kind = mail.FeedbackBounced
		}
		at = r.Bounce.Timestamp
		for _, b := range r.Bounce.BouncedRecipients {
			to = append(to, recipient{b.EmailAddress, strings.TrimSpace(r.Bounce.BounceType + " " + r.Bounce.BounceSubType + " " + b.DiagnosticCode)})
		}
	case typ == "Complaint" && r.Complaint != nil:
		kind, at = mail.FeedbackComplained, r.Complaint.Timestamp
		for _, c := range r.Complaint.ComplainedRecipients {
			to = append(to, recipient{c.EmailAddress, r.Complaint.ComplaintFeedback})
		}
	case typ == "Delivery" && r.Delivery != nil:
		kind, at = mail.FeedbackDelivered, r.Delivery.Timestamp
		for _, a := range r.Delivery.Recipients {
			to = append(to, recipient{a, r.Delivery.SMTPResponse})
		}
	case typ == "DeliveryDelay" && r.DeliveryDelay != nil:
		kind, at = mail.FeedbackDeferred, r.DeliveryDelay.Timestamp
		for _, d := range r.DeliveryDelay.DelayedRecipients {
			to = append(to, recipient{d.EmailAddress, strings.TrimSpace(r.DeliveryDelay.DelayType + " " + d.DiagnosticCode)})
		}
	case typ == "Bounce" || typ == "Complaint" || typ == "Delivery" || typ == "DeliveryDelay":
		return nil, fmt.Errorf("%w: %s record without its %s object", mail.ErrMalformed, typ, strings.ToLower(typ[:1])+typ[1:])
	case typ == "":
		return nil, fmt.Errorf("%w: record without eventType or notificationType", mail.ErrMalformed)
	default:
		return nil, nil // Send, Open, Click, …: nothing about delivery
	}
	if r.Mail.MessageID == "" || len(to) == 0 {
		return nil, fmt.Errorf("%w: %s without mail.messageId or recipients", mail.ErrMalformed, typ)
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return nil, fmt.Errorf("%w: %s timestamp %q", mail.ErrMalformed, typ, at)
	}
	f := mail.Feedback{Provider: "ses", Kind: kind, ProviderMessageID: r.Mail.MessageID, At: t,
		MessageID: strings.Trim(strings.TrimSpace(r.Mail.CommonHeaders.MessageID), "<>")}
	if v := r.Mail.Tags[TagKey]; len(v) > 0 {
		f.KeyHash = v[0]
	}
	out := make([]mail.Feedback, 0, len(to))
	for i, rc := range to {
		g := f
		g.EventID = eventID
		if len(to) > 1 {
			g.EventID = fmt.Sprintf("%s#%d", eventID, i)
		}
		g.Recipient, _ = mail.NormalizeAddress(rc.address)
		g.Detail = rc.detail
		out = append(out, g)
	}
	return out, nil
}
