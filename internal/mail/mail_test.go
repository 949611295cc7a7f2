package mail

import (
	"errors"
	"strings"
	"testing"
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

// An unsubscribe token names its recipient and category, and nobody
// without the secret can make or change one.
func TestUnsubscribeToken(t *testing.T) {
	t.Parallel()
	tok := UnsubscribeToken("s3cret-s3cret-s3cret-s3cret-s3cret", "ana@example.com", "subscription")
	r, c, err := ParseUnsubscribeToken("s3cret-s3cret-s3cret-s3cret-s3cret", tok)
	if err != nil || r != "ana@example.com" || c != "subscription" {
		t.Fatalf("ParseUnsubscribeToken = %q, %q, %v", r, c, err)
	}
	forged := UnsubscribeToken("another-secret-another-secret-xx", "budi@example.com", "subscription")
	payload, _, _ := strings.Cut(forged, ".")
	_, sig, _ := strings.Cut(tok, ".")
	for _, bad := range []string{forged, payload + "." + sig, tok + "x", "nodot", ""} {
		if _, _, err := ParseUnsubscribeToken("s3cret-s3cret-s3cret-s3cret-s3cret", bad); !errors.Is(err, ErrBadUnsubscribeToken) {
			t.Errorf("ParseUnsubscribeToken(%q) = %v", bad, err)
		}
	}
}
