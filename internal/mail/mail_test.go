package mail

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

// A reply says which protocol it came in, so that a log line or a metric
// never calls an HTTP status an SMTP code.
func TestReply(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		r            Reply
		str          string
		protocolName Protocol
	}{
		{SMTPReply(550, "5.1.1"), "smtp 550 5.1.1", ProtocolSMTP},
		{SMTPReply(451, ""), "smtp 451", ProtocolSMTP},
		{HTTPStatus(429), "http 429", ProtocolHTTP},
		{Reply{}, "", ""},
	} {
		if got := tt.r.String(); got != tt.str {
			t.Errorf("%+v.String() = %q, want %q", tt.r, got, tt.str)
		}
		if tt.r.Protocol != tt.protocolName {
			t.Errorf("%+v: protocol %q", tt.r, tt.r.Protocol)
		}
	}
	err := &SendError{Outcome: OutcomeTemporary, Stage: StageData, Reply: HTTPStatus(503)}
	if !strings.Contains(err.Error(), "(503)") {
		t.Errorf("Error() = %q", err.Error())
	}
}

// The names a delivery goes by outside PostgreSQL carry no address, and
// are the same on every attempt.
func TestKeyDerivedNames(t *testing.T) {
	t.Parallel()
	key := "order-confirmation:0190c5a0-0000-7000-8000-000000000000:ana@example.com"
	if h := KeyHash(key); len(h) != 32 || h != KeyHash(key) || strings.Contains(h, "ana") {
		t.Errorf("KeyHash = %q", h)
	}
	if p := ProviderKey(key); len(p) != 71 || !strings.HasPrefix(p, "sekali-") {
		t.Errorf("ProviderKey = %q", p)
	}
	if id := MessageID(key, "shop.example"); id != KeyHash(key)+"@shop.example" || id != MessageIDOfHash(KeyHash(key), "shop.example") {
		t.Errorf("MessageID = %q", id)
	}
	if d := MessageIDDomain(" Orders@Shop.Example "); d != "shop.example" {
		t.Errorf("MessageIDDomain = %q", d)
	}
	if got := RedactAddresses("550 5.1.1 <ana@example.com>: Recipient address rejected"); strings.Contains(got, "ana@") {
		t.Errorf("RedactAddresses left the address: %q", got)
	}
}

// An unsubscribe token names its recipient, its category and its issue
// day, and nobody without the secret can make or change one.
func TestUnsubscribeToken(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-s3cret-s3cret-s3cret-s3cret"
	now := time.Date(2026, 12, 2, 15, 4, 5, 0, time.UTC)
	tok := UnsubscribeToken(secret, "ana@example.com", "subscription", now)
	c, err := ParseUnsubscribeToken(secret, tok, now, DefaultUnsubscribeTTL)
	if err != nil || c.Recipient != "ana@example.com" || c.Category != "subscription" || !c.Issued.Equal(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) || c.Legacy() {
		t.Fatalf("ParseUnsubscribeToken = %+v, %v", c, err)
	}
	if again := UnsubscribeToken(secret, "ana@example.com", "subscription", now.Add(8*time.Hour)); again != tok {
		t.Errorf("a token issued later the same day differs: %s, %s (a retry's message would differ)", again, tok)
	}
	forged := UnsubscribeToken("another-secret-another-secret-xx", "budi@example.com", "subscription", now)
	payload, sig, _ := strings.Cut(tok, ".")
	forgedPayload, _, _ := strings.Cut(forged, ".")
	for _, bad := range []string{forged, forgedPayload + "." + sig, tok + "x", tok + "=", payload + ".\n" + sig,
		payload + "." + sig[:20] + "\n" + sig[20:], nonCanonical(sig, payload), "nodot", "",
		// Signed, but for no address: the worker signs a delivery's recipient.
		UnsubscribeToken(secret, "ana\x00@example.com", "subscription", now), UnsubscribeToken(secret, "Ana@Example.com", "subscription", now),
		UnsubscribeToken(secret, "", "subscription", now)} {
		if _, err := ParseUnsubscribeToken(secret, bad, now, DefaultUnsubscribeTTL); !errors.Is(err, ErrBadUnsubscribeToken) {
			t.Errorf("ParseUnsubscribeToken(%q) = %v", bad, err)
		}
	}
}

// nonCanonical is the token payload.sig with the last character of sig
// changed in a bit that carries no data: a lenient decoder reads the
// same signature from it.
func nonCanonical(sig, payload string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, sig[len(sig)-1])
	return payload + "." + sig[:len(sig)-1] + string(alphabet[last^1])
}

// A token works for its lifetime after the end of its issue day, and is
// refused as expired after; a token of the first format, without a
// day, keeps working, since mail that carries it was sent without a
// promise of when it would stop.
func TestUnsubscribeTokenLifetime(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-s3cret-s3cret-s3cret-s3cret"
	sent := time.Date(2026, 1, 10, 9, 0, 0, 0, time.UTC)
	tok := UnsubscribeToken(secret, "ana@example.com", "subscription", sent)
	for _, tt := range []struct {
		at   time.Time
		want error
	}{
		{sent, nil},
		{sent.AddDate(0, 6, 0), nil},
		{time.Date(2027, 1, 10, 23, 59, 0, 0, time.UTC), nil}, // 365 days after the end of 10 January
		{time.Date(2027, 1, 11, 0, 0, 1, 0, time.UTC), ErrExpiredUnsubscribeToken},
		{sent.AddDate(5, 0, 0), ErrExpiredUnsubscribeToken},
		{sent.AddDate(0, 0, -2), ErrBadUnsubscribeToken}, // issued on a day still to come
	} {
		c, err := ParseUnsubscribeToken(secret, tok, tt.at, DefaultUnsubscribeTTL)
		if !errors.Is(err, tt.want) || err == nil && c.Recipient != "ana@example.com" {
			t.Errorf("at %s: %+v, %v, want %v", tt.at, c, err, tt.want)
		}
	}
	if _, err := ParseUnsubscribeToken(secret, tok, sent.AddDate(0, 0, 3), 48*time.Hour); !errors.Is(err, ErrExpiredUnsubscribeToken) {
		t.Errorf("with a lifetime of 48h, three days later: %v", err)
	}

	// The first format: base64url(category "\n" recipient), signed the same way.
	payload := base64.RawURLEncoding.EncodeToString([]byte("subscription\nbudi@example.com"))
	legacy := payload + "." + base64.RawURLEncoding.EncodeToString(unsubscribeMAC(secret, payload))
	c, err := ParseUnsubscribeToken(secret, legacy, sent.AddDate(10, 0, 0), DefaultUnsubscribeTTL)
	if err != nil || c.Recipient != "budi@example.com" || c.Category != "subscription" || !c.Legacy() {
		t.Errorf("a token of the first format, ten years on: %+v, %v", c, err)
	}
	if _, err := ParseUnsubscribeToken(secret, nonCanonical(legacy[len(payload)+1:], payload), sent, DefaultUnsubscribeTTL); !errors.Is(err, ErrBadUnsubscribeToken) {
		t.Errorf("a token of the first format with a non-canonical signature: %v", err)
	}
}

// The whole of test mode's domain is test mode's: its names and the
// names under it, and nothing that merely ends in its letters.
func TestIsTestAddress(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"bounced@sekali.test": true, "x@sub.sekali.test": true, "x@a.b.sekali.test": true,
		"x@notsekali.test": false, "x@sekali.test.example.com": false, "sekali.test@example.com": false, "x@example.com": false,
	} {
		if got := IsTestAddress(addr); got != want {
			t.Errorf("IsTestAddress(%q) = %v, want %v", addr, got, want)
		}
	}
}

// The waits a provider names in a refusal's text: a date, a count of
// seconds or minutes; none, garbled or past, is no wait.
func TestPauseNamed(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 8, 25, 6, 59, 31, 0, time.UTC)
	for text, want := range map[string]time.Duration{
		"Domain mg.example.com is not allowed to send: recipient limit exceeded, try again after Mon, 25 Aug 2025 07:00:31 UTC": time.Minute,
		"recipient limit exceeded, Try Again After Mon, 25 Aug 2025 07:00:31 +0000 (then)":                                      time.Minute,
		"recipient limit exceeded, try again after Mon, 25 Aug 2025 06:00:00 UTC":                                               0,
		"recipient limit exceeded, try again after tomorrow":                                                                    0,
		"Too many messages. Try again in 92 seconds.":                                                                           92 * time.Second,
		"rate limit exceeded, try again in 2 min":                                                                               2 * time.Minute,
		"try again in 1 hour": time.Hour,
		"try again later":     0,
	} {
		if got := PauseNamed(text, now); got != want {
			t.Errorf("PauseNamed(%q) = %s, want %s", text, got, want)
		}
	}
}
