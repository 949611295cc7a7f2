package ses_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/ses"
)

const topic = "arn:aws:sns:us-east-1:123456789012:ses-feedback"

type bundle struct {
	v          *ses.WebhookVerifier
	srv        *httptest.Server
	key        *rsa.PrivateKey
	certURL    string
	certGets   *atomic.Int32
	confirmed  *atomic.Int32
	confirmURL string
}

// setup makes a test CA, a signing certificate it issues (as SNS's is
// issued by a CA), and an HTTPS server that serves the certificate and
// counts subscription confirmations.
func setup(t *testing.T) bundle {
	t.Helper()
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test SNS CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "sns.amazonaws.com"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER})

	var certGets, confirmed atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/SimpleNotificationService-test.pem":
			certGets.Add(1)
			_, _ = w.Write(certPEM)
		case "/confirm":
			confirmed.Add(1)
			_, _ = w.Write([]byte("<ConfirmSubscriptionResponse/>"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	v, err := ses.NewWebhookVerifier(topic)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "https://")
	v.SetTestTransport(srv.Client(), func(h string) bool { return h == host })
	return bundle{v: v, srv: srv, key: key, certURL: srv.URL + "/SimpleNotificationService-test.pem",
		certGets: &certGets, confirmed: &confirmed, confirmURL: srv.URL + "/confirm?Action=ConfirmSubscription&Token=abc"}
}

// sign fills in Signature for SignatureVersion version over the canonical
// string SNS documents.
func (b bundle) sign(t *testing.T, m map[string]string, version string) []byte {
	t.Helper()
	m["SignatureVersion"] = version
	if m["SigningCertURL"] == "" {
		m["SigningCertURL"] = b.certURL
	}
	fields := []string{"Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"}
	if m["Type"] != "Notification" {
		fields = []string{"Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"}
	}
	var s strings.Builder
	for _, f := range fields {
		if v, ok := m[f]; ok {
			s.WriteString(f + "\n" + v + "\n")
		}
	}
	var digest []byte
	hash := crypto.SHA256
	if version == "1" {
		hash = crypto.SHA1
		d := sha1.Sum([]byte(s.String()))
		digest = d[:]
	} else {
		d := sha256.Sum256([]byte(s.String()))
		digest = d[:]
	}
	sig, err := rsa.SignPKCS1v15(rand.Reader, b.key, hash, digest)
	if err != nil {
		t.Fatal(err)
	}
	m["Signature"] = base64.StdEncoding.EncodeToString(sig)
	body, _ := json.Marshal(m)
	return body
}

func notification(sesRecord string) map[string]string {
	return map[string]string{"Type": "Notification", "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324", "TopicArn": topic,
		"Subject": "Amazon SES Email Event Notification", "Message": sesRecord, "Timestamp": time.Now().UTC().Format("2006-01-02T15:04:05.000Z")}
}

// An SES record as in SES's documentation, with our Message-ID and tag.
func record(eventType, extra string) string {
	return `{"eventType":"` + eventType + `",` + extra + `,"mail":{"timestamp":"2017-08-05T00:40:02.012Z","source":"orders@shop.example",
"messageId":"EXAMPLE7c191be45-e9aedb9a-02f9-4d12-a87d-dd0099a07f8a-000000","destination":["Budi@Example.com"],
"commonHeaders":{"messageId":"<abc@shop.example>"},"tags":{"sekali-key":["0123456789abcdef0123456789abcdef"]}}}`
}

func TestSESEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		record  string
		version string
		kind    mail.FeedbackKind
	}{
		{record("Bounce", `"bounce":{"bounceType":"Permanent","bounceSubType":"General","bouncedRecipients":[{"emailAddress":"budi@example.com","diagnosticCode":"smtp; 550 5.1.1 user unknown"}],"timestamp":"2017-08-05T00:41:02.669Z"}`), "2", mail.FeedbackBounced},
		{record("Bounce", `"bounce":{"bounceType":"Transient","bounceSubType":"MailboxFull","bouncedRecipients":[{"emailAddress":"budi@example.com"}],"timestamp":"2017-08-05T00:41:02.669Z"}`), "1", mail.FeedbackDeferred},
		{record("Complaint", `"complaint":{"complainedRecipients":[{"emailAddress":"budi@example.com"}],"timestamp":"2017-08-05T00:41:02.669Z","complaintFeedbackType":"abuse"}`), "2", mail.FeedbackComplained},
		{record("Delivery", `"delivery":{"timestamp":"2017-08-05T00:41:02.669Z","recipients":["budi@example.com"],"smtpResponse":"250 2.6.0 Message received"}`), "1", mail.FeedbackDelivered},
		{record("DeliveryDelay", `"deliveryDelay":{"timestamp":"2017-08-05T00:41:02.669Z","delayType":"MailboxFull","delayedRecipients":[{"emailAddress":"budi@example.com"}]}`), "2", mail.FeedbackDeferred},
		{strings.Replace(record("Delivery", `"delivery":{"timestamp":"2017-08-05T00:41:02.669Z","recipients":["budi@example.com"]}`), `"eventType"`, `"notificationType"`, 1), "2", mail.FeedbackDelivered},
		{record("Send", `"send":{}`), "2", ""},
	}
	for i, c := range cases {
		body := b.sign(t, notification(c.record), c.version)
		res, err := b.v.Verify(context.Background(), nil, body, time.Now())
		if err != nil {
			t.Errorf("case %d: %v", i, err)
			continue
		}
		if res.Confirmation != nil {
			t.Errorf("case %d: a confirmation", i)
		}
		if c.kind == "" {
			if len(res.Feedback) != 0 {
				t.Errorf("case %d: %+v, want none", i, res.Feedback)
			}
			continue
		}
		if len(res.Feedback) != 1 {
			t.Fatalf("case %d: %d feedbacks", i, len(res.Feedback))
		}
		f := res.Feedback[0]
		if f.Kind != c.kind || f.Provider != "ses" || f.EventID != "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324" || f.MessageID != "abc@shop.example" ||
			f.KeyHash != "0123456789abcdef0123456789abcdef" || f.Recipient != "budi@example.com" || f.At.IsZero() ||
			f.ProviderMessageID != "EXAMPLE7c191be45-e9aedb9a-02f9-4d12-a87d-dd0099a07f8a-000000" {
			t.Errorf("case %d: %+v, want %s", i, f, c.kind)
		}
	}
	if n := b.certGets.Load(); n != 1 {
		t.Errorf("the certificate was fetched %d times, want once", n)
	}
}

func TestSNSRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := record("Delivery", `"delivery":{"timestamp":"2017-08-05T00:41:02.669Z","recipients":["budi@example.com"]}`)
	check := func(name string, body []byte, want error) {
		t.Helper()
		if _, err := b.v.Verify(context.Background(), nil, body, time.Now()); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	tampered := b.sign(t, notification(ok), "2")
	tampered = []byte(strings.Replace(string(tampered), "budi@example.com", "ani@example.com", 1))
	check("tampered", tampered, mail.ErrBadSignature)

	m := notification(ok)
	m["TopicArn"] = "arn:aws:sns:us-east-1:999999999999:someone-else"
	check("other topic", b.sign(t, m, "2"), mail.ErrBadSignature)

	m = notification(ok)
	m["Timestamp"] = time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)
	check("stale", b.sign(t, m, "2"), mail.ErrStale)

	for _, u := range []string{
		strings.Replace(b.certURL, "https://", "http://", 1),
		"https://sns.us-east-1.amazonaws.com.evil.example/cert.pem",
		"https://user:pw@" + strings.TrimPrefix(b.certURL, "https://"),
	} {
		m = notification(ok)
		m["SigningCertURL"] = u
		check("cert URL "+u, b.sign(t, m, "2"), mail.ErrBadSignature)
	}
	m = notification(ok)
	m["SignatureVersion"] = "3"
	body := b.sign(t, m, "3")
	check("version 3", body, mail.ErrBadSignature)

	check("not JSON", []byte("Type=Notification"), mail.ErrMalformed)
	check("huge", []byte(strings.Repeat(" ", ses.MaxWebhookBody+1)), mail.ErrMalformed)
	m = notification(ok)
	m["Type"] = "Something"
	check("unknown type", b.sign(t, m, "2"), mail.ErrMalformed)
	check("not an SES record", b.sign(t, notification(`{"hello":1}`), "2"), mail.ErrMalformed)

	if _, err := ses.NewWebhookVerifier(); err == nil {
		t.Error("a verifier without topics")
	}
	if _, err := ses.NewWebhookVerifier("ses-feedback"); err == nil {
		t.Error("a topic that is no ARN")
	}
}

// The real host rule, without the test transport: nothing is fetched
// from a host that is not Amazon SNS's.
func TestSNSHostRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v, err := ses.NewWebhookVerifier(topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{
		b.certURL, // a valid signature, served from 127.0.0.1
		"https://sns.us-east-1.amazonaws.com:8443/cert.pem",
		"https://xsns.us-east-1.amazonaws.com/cert.pem",
		"https://sns.amazonaws.com/cert.pem",
		"https://sns.us-east-1.amazonaws.com.evil.example/cert.pem",
		"https://s3.amazonaws.com/cert.pem",
	} {
		m := notification(record("Send", `"send":{}`))
		m["SigningCertURL"] = u
		if _, err := v.Verify(context.Background(), nil, b.sign(t, m, "2"), time.Now()); !errors.Is(err, mail.ErrBadSignature) || !strings.Contains(err.Error(), "not on an Amazon SNS host") {
			t.Errorf("%s: %v, want refused by the host rule", u, err)
		}
	}
	if n := b.certGets.Load(); n != 0 {
		t.Errorf("%d certificate fetches", n)
	}
}

func TestSubscriptionConfirmation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := map[string]string{"Type": "SubscriptionConfirmation", "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b", "Token": "2336412f37",
		"TopicArn": topic, "Message": "You have chosen to subscribe to the topic " + topic + ".\nTo confirm the subscription, visit the SubscribeURL included in this message.",
		"SubscribeURL": b.confirmURL, "Timestamp": time.Now().UTC().Format(time.RFC3339Nano)}
	res, err := b.v.Verify(context.Background(), nil, b.sign(t, m, "1"), time.Now())
	if err != nil || res.Confirmation == nil || len(res.Feedback) != 0 {
		t.Fatalf("confirmation: %+v %v", res, err)
	}
	c := res.Confirmation
	if c.TopicARN != topic || c.SubscribeURL != b.confirmURL || c.Token != "2336412f37" || c.Type != "SubscriptionConfirmation" {
		t.Errorf("confirmation %+v", c)
	}
	if err := b.v.Confirm(context.Background(), c); err != nil || b.confirmed.Load() != 1 {
		t.Errorf("Confirm: %v, %d confirmations", err, b.confirmed.Load())
	}
	// A SubscribeURL elsewhere is refused, signed or not, and Confirm
	// will not fetch one either.
	m["SubscribeURL"] = "https://evil.example/confirm"
	if _, err := b.v.Verify(context.Background(), nil, b.sign(t, m, "2"), time.Now()); !errors.Is(err, mail.ErrBadSignature) {
		t.Errorf("SubscribeURL elsewhere: %v", err)
	}
	if err := b.v.Confirm(context.Background(), &ses.Confirmation{SubscribeURL: "https://evil.example/confirm"}); err == nil {
		t.Error("Confirm fetched a URL elsewhere")
	}
}
