package postmark_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/postmark"
)

const (
	hookUser     = "postmark-hooks"
	hookPassword = "correct horse battery staple"
)

func hookHeader(user, password string) http.Header {
	r, _ := http.NewRequest(http.MethodPost, "http://x", nil)
	r.SetBasicAuth(user, password)
	return r.Header
}

// Bodies as in Postmark's webhook documentation, with our metadata.
const (
	delivery = `{"RecordType":"Delivery","ServerID":23,"MessageStream":"outbound","MessageID":"883953f4-6105-42a2-a16a-77a8eac79483",
"Recipient":"Budi@Example.com","Tag":"welcome-email","DeliveredAt":"2019-11-05T16:33:54.9070259Z","Details":"Test delivery webhook details",
"Metadata":{"sekali-key":"0123456789abcdef0123456789abcdef"}}`
	bounce = `{"RecordType":"Bounce","MessageStream":"outbound","ID":4323372036854775807,"Type":"%s","TypeCode":1,"Name":"Hard bounce",
"Tag":"Test","MessageID":"883953f4-6105-42a2-a16a-77a8eac79483","Metadata":{"sekali-key":"0123456789abcdef0123456789abcdef"},"ServerID":1234,
"Description":"The server was unable to deliver your message (ex: unknown user, mailbox not found).","Details":"Test bounce details",
"Email":"budi@example.com","From":"orders@shop.example","BouncedAt":"2019-11-05T16:33:54.9070259Z","DumpAvailable":true,"Inactive":%s,
"CanActivate":true,"Subject":"Test subject"}`
	complaint = `{"RecordType":"SpamComplaint","MessageStream":"outbound","ID":42,"Type":"SpamComplaint","TypeCode":512,"Name":"Spam complaint",
"MessageID":"883953f4-6105-42a2-a16a-77a8eac79483","Metadata":{},"ServerID":1234,"Description":"","Details":"Test spam complaint details",
"Email":"budi@example.com","From":"orders@shop.example","BouncedAt":"2019-11-05T16:33:54.9070259Z","Inactive":true,"CanActivate":false}`
)

func bounceOf(typ string, inactive bool) string {
	in := "false"
	if inactive {
		in = "true"
	}
	return strings.Replace(strings.Replace(bounce, "%s", typ, 1), "%s", in, 1)
}

func TestWebhookEvents(t *testing.T) {
	t.Parallel()
	v, err := postmark.NewWebhookVerifier(hookUser, hookPassword)
	if err != nil {
		t.Fatal(err)
	}
	h := hookHeader(hookUser, hookPassword)
	cases := []struct {
		body    string
		kind    mail.FeedbackKind
		eventID string
	}{
		{delivery, mail.FeedbackDelivered, "Delivery:883953f4-6105-42a2-a16a-77a8eac79483:budi@example.com"},
		{bounceOf("HardBounce", true), mail.FeedbackBounced, "Bounce:4323372036854775807"},
		{bounceOf("BadEmailAddress", false), mail.FeedbackBounced, "Bounce:4323372036854775807"},
		{bounceOf("SoftBounce", false), mail.FeedbackDeferred, "Bounce:4323372036854775807"},
		{bounceOf("Transient", false), mail.FeedbackDeferred, "Bounce:4323372036854775807"},
		{bounceOf("DnsError", false), mail.FeedbackDeferred, "Bounce:4323372036854775807"},
		{bounceOf("Blocked", true), mail.FeedbackBounced, "Bounce:4323372036854775807"},
		{bounceOf("AutoResponder", false), "", ""},
		{complaint, mail.FeedbackComplained, "SpamComplaint:42"},
		{`{"RecordType":"Open","MessageID":"883953f4"}`, "", ""},
	}
	for i, c := range cases {
		fs, err := v.Verify(h, []byte(c.body), time.Now())
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
			t.Fatalf("case %d: %d feedbacks", i, len(fs))
		}
		f := fs[0]
		if f.Kind != c.kind || f.EventID != c.eventID || f.Provider != "postmark" || f.Recipient != "budi@example.com" ||
			f.ProviderMessageID != "883953f4-6105-42a2-a16a-77a8eac79483" || f.At.IsZero() {
			t.Errorf("case %d: %+v, want kind %s, event %s", i, f, c.kind, c.eventID)
		}
		if c.body != complaint && f.KeyHash != "0123456789abcdef0123456789abcdef" {
			t.Errorf("case %d: key hash %q", i, f.KeyHash)
		}
		again, err := v.Verify(h, []byte(c.body), time.Now().Add(time.Hour))
		if err != nil || again[0].EventID != f.EventID {
			t.Errorf("case %d again: %v %v", i, again, err)
		}
	}
}

func TestWebhookRefusals(t *testing.T) {
	t.Parallel()
	v, err := postmark.NewWebhookVerifier(hookUser, hookPassword)
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]http.Header{
		"none":           {},
		"wrong password": hookHeader(hookUser, hookPassword+"!"),
		"wrong user":     hookHeader("someone", hookPassword),
		"bearer":         {"Authorization": {"Bearer " + hookPassword}},
	} {
		if _, err := v.Verify(h, []byte(delivery), time.Now()); !errors.Is(err, mail.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadCredentials", name, err)
		}
	}
	h := hookHeader(hookUser, hookPassword)
	for name, body := range map[string]string{
		"huge":          strings.Repeat(" ", httpprovider.MaxWebhookBody+1),
		"not JSON":      "<xml/>",
		"no RecordType": `{"MessageID":"x"}`,
		"no bounce ID":  `{"RecordType":"Bounce","Type":"HardBounce","MessageID":"x","BouncedAt":"2019-11-05T16:33:54Z"}`,
		"no time":       `{"RecordType":"Delivery","MessageID":"x","Recipient":"budi@example.com"}`,
		"no recipient":  `{"RecordType":"Delivery","MessageID":"x","DeliveredAt":"2019-11-05T16:33:54Z"}`,
	} {
		if _, err := v.Verify(h, []byte(body), time.Now()); !errors.Is(err, mail.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	for _, c := range [][2]string{{"", hookPassword}, {"a:b", hookPassword}, {hookUser, "short"}} {
		if _, err := postmark.NewWebhookVerifier(c[0], c[1]); err == nil {
			t.Errorf("NewWebhookVerifier(%q, %q) accepted", c[0], c[1])
		}
	}
}
