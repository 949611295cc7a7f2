package resend_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/resend"
	"github.com/sekali-dev/sekali/internal/resend/resendtest"
)

// Svix's published example (docs.svix.com, "Verifying Webhooks
// Manually", and Resend's "Verify Webhooks Requests").
const (
	svixSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	svixID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	svixTimestamp = 1614265330
	svixBody      = `{"test": 2432232314}`
	svixSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func verifier(t *testing.T, secret string) *resend.WebhookVerifier {
	t.Helper()
	v, err := resend.NewWebhookVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func svixHeader(id string, ts int64, sigs ...string) http.Header {
	h := http.Header{}
	h.Set("svix-id", id)
	h.Set("svix-timestamp", strconv.FormatInt(ts, 10))
	h.Set("svix-signature", strings.Join(sigs, " "))
	return h
}

// sign signs body as Svix does, with the secret's key (resendtest's
// signer, which the published example below checks).
func sign(t *testing.T, secret, id string, ts int64, body string) string {
	t.Helper()
	h, err := resendtest.SignWebhook(secret, id, time.Unix(ts, 0), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return h.Get("svix-signature")
}

func TestSvixPublishedExample(t *testing.T) {
	t.Parallel()
	v := verifier(t, svixSecret)
	if got := sign(t, svixSecret, svixID, svixTimestamp, svixBody); got != svixSignature {
		t.Fatalf("our signing gives %s, Svix publishes %s", got, svixSignature)
	}
	at := time.Unix(svixTimestamp, 0)
	// The signature holds; the example body is not a Resend event.
	_, err := v.Verify(svixHeader(svixID, svixTimestamp, svixSignature), []byte(svixBody), at.Add(time.Minute))
	if !errors.Is(err, mail.ErrMalformed) {
		t.Errorf("published example: %v, want a verified signature and ErrMalformed (no event type)", err)
	}
	_, err = v.Verify(svixHeader(svixID, svixTimestamp, svixSignature), []byte(svixBody), at.Add(6*time.Minute))
	if !errors.Is(err, mail.ErrStale) {
		t.Errorf("6 minutes later: %v, want ErrStale", err)
	}
	_, err = v.Verify(svixHeader(svixID, svixTimestamp, svixSignature), []byte(svixBody), at.Add(-6*time.Minute))
	if !errors.Is(err, mail.ErrStale) {
		t.Errorf("6 minutes early: %v, want ErrStale", err)
	}
	_, err = v.Verify(svixHeader(svixID, svixTimestamp, svixSignature), []byte(`{"test": 2432232315}`), at)
	if !errors.Is(err, mail.ErrBadSignature) {
		t.Errorf("changed body: %v, want ErrBadSignature", err)
	}
	_, err = v.Verify(svixHeader(svixID, svixTimestamp+1, svixSignature), []byte(svixBody), at)
	if !errors.Is(err, mail.ErrBadSignature) {
		t.Errorf("changed timestamp: %v, want ErrBadSignature", err)
	}
}

const bounced = `{"type":"email.bounced","created_at":"2026-11-22T23:41:12.126Z","data":{"created_at":"2026-11-22T23:41:11.894Z",
"email_id":"56761188-7520-42d8-8898-ff6fc54ce618","message_id":"<abc@shop.example>","from":"Shop <orders@shop.example>",
"to":["Budi@Example.com"],"subject":"Pesanan","bounce":{"message":"mailbox unavailable","subType":"General","type":"%s"},
"tags":{"sekali-key":"0123456789abcdef0123456789abcdef"}}}`

func TestWebhookEvents(t *testing.T) {
	t.Parallel()
	v := verifier(t, svixSecret)
	now := time.Now()
	cases := []struct {
		body string
		kind mail.FeedbackKind // "" for no feedback
	}{
		{strings.Replace(bounced, "%s", "Permanent", 1), mail.FeedbackBounced},
		{strings.Replace(bounced, "%s", "Transient", 1), mail.FeedbackDeferred},
		{strings.Replace(bounced, "%s", "Undetermined", 1), mail.FeedbackDeferred},
		{`{"type":"email.delivered","created_at":"2026-11-22T23:41:12Z","data":{"email_id":"e1","message_id":"<abc@shop.example>","to":["budi@example.com"]}}`, mail.FeedbackDelivered},
		{`{"type":"email.complained","created_at":"2026-11-22T23:41:12Z","data":{"email_id":"e1","message_id":"<abc@shop.example>","to":["budi@example.com"]}}`, mail.FeedbackComplained},
		{`{"type":"email.delivery_delayed","created_at":"2026-11-22T23:41:12Z","data":{"email_id":"e1","message_id":"<abc@shop.example>","to":["budi@example.com"]}}`, mail.FeedbackDeferred},
		{`{"type":"email.opened","created_at":"2026-11-22T23:41:12Z","data":{"email_id":"e1","to":["budi@example.com"]}}`, ""},
	}
	for i, c := range cases {
		id := "msg_" + strconv.Itoa(i)
		h := svixHeader(id, now.Unix(), sign(t, svixSecret, id, now.Unix(), c.body))
		fs, err := v.Verify(h, []byte(c.body), now)
		if err != nil {
			t.Errorf("case %d: %v", i, err)
			continue
		}
		if c.kind == "" {
			if len(fs) != 0 {
				t.Errorf("case %d: %+v, want no feedback", i, fs)
			}
			continue
		}
		if len(fs) != 1 {
			t.Fatalf("case %d: %d feedbacks, want 1", i, len(fs))
		}
		f := fs[0]
		if f.Kind != c.kind || f.Provider != "resend" || f.EventID != id || f.MessageID != "abc@shop.example" ||
			f.Recipient != "budi@example.com" || f.ProviderMessageID == "" || f.At.IsZero() {
			t.Errorf("case %d: %+v, want kind %s, event %s, our Message-ID, normalized recipient", i, f, c.kind, id)
		}
		if i == 0 && (f.KeyHash != "0123456789abcdef0123456789abcdef" || !strings.Contains(f.Detail, "mailbox unavailable")) {
			t.Errorf("bounce: key hash %q, detail %q", f.KeyHash, f.Detail)
		}
		// The same event again (Resend retries) has the same id.
		again, err := v.Verify(h, []byte(c.body), now.Add(time.Second))
		if err != nil || len(again) != 1 || again[0].EventID != f.EventID {
			t.Errorf("case %d again: %+v, %v; want the same EventID %s", i, again, err, f.EventID)
		}
	}
}

func TestWebhookRefusals(t *testing.T) {
	t.Parallel()
	v := verifier(t, svixSecret)
	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another secret of the same length!"))
	now := time.Now()
	ts := now.Unix()
	body := `{"type":"email.delivered","created_at":"2026-11-22T23:41:12Z","data":{"email_id":"e1","to":["budi@example.com"]}}`
	good := sign(t, svixSecret, "msg_1", ts, body)

	check := func(name string, h http.Header, body string, want error) {
		t.Helper()
		if _, err := v.Verify(h, []byte(body), now); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	check("wrong secret", svixHeader("msg_1", ts, sign(t, other, "msg_1", ts, body)), body, mail.ErrBadSignature)
	check("no signature", svixHeader("msg_1", ts), body, mail.ErrBadSignature)
	check("no headers", http.Header{}, body, mail.ErrBadSignature)
	check("other id", svixHeader("msg_2", ts, good), body, mail.ErrBadSignature)
	check("v2 only", svixHeader("msg_1", ts, strings.Replace(good, "v1,", "v2,", 1)), body, mail.ErrBadSignature)
	check("not base64", svixHeader("msg_1", ts, "v1,***"), body, mail.ErrBadSignature)
	check("old", svixHeader("msg_1", ts-600, sign(t, svixSecret, "msg_1", ts-600, body)), body, mail.ErrStale)
	huge := strings.Repeat(" ", httpprovider.MaxWebhookBody+1)
	check("huge", svixHeader("msg_1", ts, sign(t, svixSecret, "msg_1", ts, huge)), huge, mail.ErrMalformed)
	check("not JSON", svixHeader("msg_1", ts, sign(t, svixSecret, "msg_1", ts, "nope")), "nope", mail.ErrMalformed)
	noID := `{"type":"email.delivered","created_at":"2026-11-22T23:41:12Z","data":{}}`
	check("no email_id", svixHeader("msg_1", ts, sign(t, svixSecret, "msg_1", ts, noID)), noID, mail.ErrMalformed)

	// Secret rotation: one of several signatures is enough.
	if _, err := v.Verify(svixHeader("msg_1", ts, "v1,AAAA", good), []byte(body), now); err != nil {
		t.Errorf("two signatures, the second right: %v", err)
	}
	// Svix's white-labelled header names.
	h := http.Header{}
	h.Set("webhook-id", "msg_1")
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", good)
	if _, err := v.Verify(h, []byte(body), now); err != nil {
		t.Errorf("webhook-* headers: %v", err)
	}
	for _, bad := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_***"} {
		if _, err := resend.NewWebhookVerifier(bad); err == nil {
			t.Errorf("NewWebhookVerifier(%q) accepted", bad)
		}
	}
}
