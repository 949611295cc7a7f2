package sekali_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sekali-dev/sekali"
)

// newSecret is an endpoint's secret as sekali makes one: whsec_ and the
// base64 of 32 random bytes.
func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// signed is the headers the Standard Webhooks reference library makes for
// body under each secret (several: the signatures of a rotation, space
// separated, as sekali sends them), at ts.
func signed(t *testing.T, id string, ts time.Time, body []byte, secrets ...string) http.Header {
	t.Helper()
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	var sigs string
	for i, s := range secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := wh.Sign(id, ts, body)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			sigs += " "
		}
		sigs += sig
	}
	h.Set("webhook-signature", sigs)
	return h
}

const sentEvent = `{"data": {"order_id": "01a23291-d0ad-7a36-b588-4e979e7c2466", "status": "sent", "template": "order-confirmation", "idempotency_key": "order-confirmation:01a23291-d0ad-7a36-b588-4e979e7c2466:ana@example.com", "notification_id": "01a23291-d0ad-7ac0-9c49-a6a5aef27dbe", "provider_message_id": "21I4gYS38F9RPmAhkyDZLL"}, "type": "notification.sent", "timestamp": "2026-12-01T17:04:56.123456Z"}`

// What the Standard Webhooks reference library signs, the verifier takes,
// and decodes into the event; what it would refuse, the verifier refuses.
func TestWebhookVerifierTakesWhatTheReferenceLibrarySigns(t *testing.T) {
	t.Parallel()
	secret, other := newSecret(t), newSecret(t)
	v, err := sekali.NewWebhookVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(sentEvent)
	now := time.Now()

	e, err := v.Verify(signed(t, "msg_42", now, body, secret), body)
	if err != nil {
		t.Fatalf("a body the reference library signed: %v", err)
	}
	if e.ID != "msg_42" || e.Type != sekali.EventSent || e.Data.Status != sekali.StatusSent ||
		e.Data.NotificationID.String() != "01a23291-d0ad-7ac0-9c49-a6a5aef27dbe" || e.Data.OrderID.String() != "01a23291-d0ad-7a36-b588-4e979e7c2466" ||
		e.Data.ProviderMessageID != "21I4gYS38F9RPmAhkyDZLL" || e.Data.Template != "order-confirmation" ||
		!e.Timestamp.Equal(time.Date(2026, 12, 1, 17, 4, 56, 123456000, time.UTC)) {
		t.Errorf("event = %+v", e)
	}

	// A rotation: sekali signs with the new secret and the previous one;
	// a receiver holding either takes it, as does one holding both.
	rotated := signed(t, "msg_43", now, body, other, secret)
	for _, secrets := range [][]string{{secret}, {other}, {newSecret(t), other}} {
		v, err := sekali.NewWebhookVerifier(secrets...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(rotated, body); err != nil {
			t.Errorf("two signatures, the receiver holding %d secret(s): %v", len(secrets), err)
		}
	}
	// The reference library takes the rotation's header too.
	if wh, _ := standardwebhooks.NewWebhook(secret); wh.Verify(body, rotated) != nil {
		t.Error("the reference library refuses the two signatures")
	}

	tampered := []byte(sentEvent[:len(sentEvent)-2] + `, "x": 1}`)
	noID := signed(t, "msg_44", now, body, secret)
	noID.Del("webhook-id")
	badTS := signed(t, "msg_45", now, body, secret)
	badTS.Set("webhook-timestamp", "yesterday")
	otherVersion := signed(t, "msg_46", now, body, secret)
	otherVersion.Set("webhook-signature", "v1a,"+otherVersion.Get("webhook-signature")[3:])
	for _, tt := range []struct {
		name string
		h    http.Header
		body []byte
		want error
	}{
		{"another secret's signature", signed(t, "msg_47", now, body, other), body, sekali.ErrWebhookSignature},
		{"a body changed after signing", signed(t, "msg_48", now, body, secret), tampered, sekali.ErrWebhookSignature},
		{"the id changed after signing", func() http.Header {
			h := signed(t, "msg_49", now, body, secret)
			h.Set("webhook-id", "msg_50")
			return h
		}(), body, sekali.ErrWebhookSignature},
		{"no webhook-id", noID, body, sekali.ErrWebhookSignature},
		{"a timestamp that is not a number", badTS, body, sekali.ErrWebhookSignature},
		{"a signature of another version", otherVersion, body, sekali.ErrWebhookSignature},
		{"signed 6 minutes ago (a replay)", signed(t, "msg_51", now.Add(-6*time.Minute), body, secret), body, sekali.ErrWebhookTimestamp},
		{"signed 6 minutes ahead", signed(t, "msg_52", now.Add(6*time.Minute), body, secret), body, sekali.ErrWebhookTimestamp},
	} {
		if _, err := v.Verify(tt.h, tt.body); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
		wh, _ := standardwebhooks.NewWebhook(secret)
		if wh.Verify(tt.body, tt.h) == nil {
			t.Errorf("%s: the reference library takes it, the verifier does not", tt.name)
		}
	}
	// Within the tolerance, and a wider one.
	if _, err := v.Verify(signed(t, "msg_53", now.Add(-4*time.Minute), body, secret), body); err != nil {
		t.Errorf("signed 4 minutes ago: %v", err)
	}
	v.Tolerance = time.Hour
	if _, err := v.Verify(signed(t, "msg_54", now.Add(-30*time.Minute), body, secret), body); err != nil {
		t.Errorf("signed 30 minutes ago, with an hour's tolerance: %v", err)
	}

	for _, bad := range []string{"", "whsec_not base64!"} {
		if _, err := sekali.NewWebhookVerifier(bad); err == nil {
			t.Errorf("NewWebhookVerifier(%q) took it", bad)
		}
	}
}
