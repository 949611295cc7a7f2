package mailgun_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailgun"
)

const signingKey = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"

// signed builds a webhook body as Mailgun does: hex HMAC-SHA256 of
// timestamp and token, keyed with the signing key.
func signed(key string, ts int64, token, eventData string) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(strconv.FormatInt(ts, 10) + token))
	return fmt.Sprintf(`{"signature":{"timestamp":"%d","token":"%s","signature":"%s"},"event-data":%s}`,
		ts, token, hex.EncodeToString(mac.Sum(nil)), eventData)
}

func eventData(event, severity string) string {
	return fmt.Sprintf(`{"id":"CPgfbmQMTCKtHW6uIWtuVe","event":"%s","severity":"%s","reason":"bounce","timestamp":1521472262.908181,
"recipient":"Budi@Example.com","message":{"headers":{"message-id":"<abc@shop.example>"}},
"user-variables":{"sekali-key":"0123456789abcdef0123456789abcdef"},
"delivery-status":{"code":550,"message":"5.1.1 no such user","description":""}}`, event, severity)
}

func TestWebhookEvents(t *testing.T) {
	t.Parallel()
	v, err := mailgun.NewWebhookVerifier(signingKey)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	token := strings.Repeat("e0b5477167", 5)
	for _, c := range []struct {
		event, severity string
		kind            mail.FeedbackKind
	}{
		{"delivered", "", mail.FeedbackDelivered},
		{"failed", "permanent", mail.FeedbackBounced},
		{"failed", "temporary", mail.FeedbackDeferred},
		{"complained", "", mail.FeedbackComplained},
		{"opened", "", ""},
		{"accepted", "", ""},
	} {
		body := signed(signingKey, now.Unix(), token, eventData(c.event, c.severity))
		res, err := v.Verify(nil, []byte(body), now)
		if err != nil {
			t.Errorf("%s %s: %v", c.event, c.severity, err)
			continue
		}
		// Every verified webhook, about delivery or not, names its token
		// for the caller to refuse the next time.
		if res.Token != token || !res.Expires.Equal(time.Unix(now.Unix(), 0).Add(httpprovider.WebhookTolerance)) {
			t.Errorf("%s: token %q, expires %v", c.event, res.Token, res.Expires)
		}
		fs := res.Feedback
		if c.kind == "" {
			if len(fs) != 0 {
				t.Errorf("%s: %+v, want no feedback", c.event, fs)
			}
			continue
		}
		if len(fs) != 1 {
			t.Fatalf("%s: %d feedbacks", c.event, len(fs))
		}
		f := fs[0]
		if f.Kind != c.kind || f.EventID != "CPgfbmQMTCKtHW6uIWtuVe" || f.MessageID != "abc@shop.example" || f.Provider != "mailgun" ||
			f.Recipient != "budi@example.com" || f.KeyHash != "0123456789abcdef0123456789abcdef" || f.At.Unix() != 1521472262 {
			t.Errorf("%s: %+v", c.event, f)
		}
		if c.event == "failed" && !strings.Contains(f.Detail, "550") {
			t.Errorf("failed: detail %q", f.Detail)
		}
	}
}

func TestWebhookRefusals(t *testing.T) {
	t.Parallel()
	v, err := mailgun.NewWebhookVerifier(signingKey)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ts := now.Unix()
	token := strings.Repeat("a", 50)
	data := eventData("delivered", "")
	check := func(name, body string, want error) {
		t.Helper()
		res, err := v.Verify(nil, []byte(body), now)
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
		// A signature that is not Mailgun's, or too old, names no token to
		// remember; a good one does, even when its event is malformed.
		if signedOK := want == mail.ErrMalformed && strings.Contains(body, `"signature"`); signedOK != (res.Token != "") {
			t.Errorf("%s: token %q", name, res.Token)
		}
	}
	check("wrong key", signed("key-other", ts, token, data), mail.ErrBadSignature)
	check("other token", strings.Replace(signed(signingKey, ts, token, data), token, strings.Repeat("b", 50), 1), mail.ErrBadSignature)
	check("no signature", `{"event-data":`+data+`}`, mail.ErrBadSignature)
	check("old", signed(signingKey, ts-600, token, data), mail.ErrStale)
	check("future", signed(signingKey, ts+600, token, data), mail.ErrStale)
	check("not JSON", "token=x&signature=y", mail.ErrMalformed)
	check("huge", strings.Repeat(" ", httpprovider.MaxWebhookBody+1), mail.ErrMalformed)
	check("no event-data", signed(signingKey, ts, token, `null`), mail.ErrMalformed)
	check("failed without severity", signed(signingKey, ts, token, eventData("failed", "")), mail.ErrMalformed)
	check("no id", signed(signingKey, ts, token, strings.Replace(data, `"id":"CPgfbmQMTCKtHW6uIWtuVe",`, "", 1)), mail.ErrMalformed)

	// A numeric timestamp (older payloads) and a subaccount's
	// parent-signature are accepted.
	mac := hmac.New(sha256.New, []byte(signingKey))
	mac.Write([]byte(strconv.FormatInt(ts, 10) + token))
	sig := hex.EncodeToString(mac.Sum(nil))
	numeric := fmt.Sprintf(`{"signature":{"timestamp":%d,"token":"%s","signature":"%s"},"event-data":%s}`, ts, token, sig, data)
	if _, err := v.Verify(nil, []byte(numeric), now); err != nil {
		t.Errorf("numeric timestamp: %v", err)
	}
	parent := fmt.Sprintf(`{"signature":{"timestamp":"%d","token":"%s","signature":"%s","parent-signature":"%s"},"event-data":%s}`,
		ts, token, strings.Repeat("0", 64), sig, data)
	if _, err := v.Verify(nil, []byte(parent), now); err != nil {
		t.Errorf("parent-signature: %v", err)
	}
	if _, err := mailgun.NewWebhookVerifier(" "); err == nil {
		t.Error("an empty signing key was accepted")
	}
}
