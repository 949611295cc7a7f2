package httpprovider

import (
	"fmt"
	"time"
)

// MaxWebhookBody is the largest webhook body a verifier reads.
const MaxWebhookBody = 1 << 20

// WebhookTolerance is how far a signed webhook's timestamp may be from
// now, either way, as Svix's own libraries allow.
const WebhookTolerance = 5 * time.Minute

// CheckWebhookBody refuses a webhook body over MaxWebhookBody; the
// verifier wraps the error in mail.ErrMalformed.
func CheckWebhookBody(body []byte) error {
	if len(body) > MaxWebhookBody {
		return fmt.Errorf("%d bytes, at most %d", len(body), MaxWebhookBody)
	}
	return nil
}

// CheckSignedAt refuses a webhook signed more than tolerance away from
// now, before or after; the verifier wraps the error in mail.ErrStale.
// It runs after the signature checked out: the timestamp is the
// provider's only then.
func CheckSignedAt(signedAt, now time.Time, tolerance time.Duration) error {
	if d := now.Sub(signedAt); d > tolerance || d < -tolerance {
		return fmt.Errorf("signed at %s, %s from now", signedAt.UTC().Format(time.RFC3339), d.Round(time.Second))
	}
	return nil
}
