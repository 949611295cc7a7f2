package httpapi_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/resend/resendtest"
	"github.com/sekali-dev/sekali/internal/roster"
)

const (
	postmarkUser     = "postmark-hooks"
	postmarkPassword = "a-password-of-some-length"
)

// hookStack is the API with Resend's and Postmark's webhooks configured
// as an operator would, through the environment.
func hookStack(t testing.TB, opts ...setupOpts) (stack, string) {
	t.Helper()
	key := make([]byte, 24)
	_, _ = rand.Read(key)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	return configuredStack(t, map[string]string{
		"RESEND_WEBHOOK_SECRET":     secret,
		"POSTMARK_WEBHOOK_USER":     postmarkUser,
		"POSTMARK_WEBHOOK_PASSWORD": postmarkPassword,
	}, opts...), secret
}

// configuredStack is the API with the webhooks these variables configure,
// read and built as cmd/api does, and opts' other settings.
func configuredStack(t testing.TB, vars map[string]string, opts ...setupOpts) stack {
	t.Helper()
	env := envconfig.New(func(k string) string { return vars[k] })
	settings := roster.ReadWebhooks(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	var o setupOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	o.webhooks = settings
	return setup(t, o)
}

// sentVia records that the order's confirmation was accepted by Resend
// under providerID, as the worker does.
func (s stack) sentVia(t *testing.T, o order.Order, providerID string) {
	t.Helper()
	s.f.Sent(s.f.Get(o.Notifications[0].ID), providerID)
}

func (s stack) resendHook(t *testing.T, secret, id string, at time.Time, body string) response {
	t.Helper()
	h, err := resendtest.SignWebhook(secret, id, at, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	header := map[string]string{"Authorization": ""}
	for k := range h {
		header[k] = h.Get(k)
	}
	return s.do(t, http.MethodPost, "/v1/webhooks/resend", "application/json", strings.NewReader(body), header)
}

func resendBounce(emailID, to string, at time.Time) string {
	return fmt.Sprintf(`{"type":"email.bounced","created_at":%q,"data":{"email_id":%q,"to":[%q],`+
		`"bounce":{"type":"Permanent","subType":"General","message":"550 5.1.1 mailbox does not exist"}}}`,
		at.UTC().Format(time.RFC3339Nano), emailID, to)
}

// A bounce that Resend signs reaches the delivery's history and the
// suppression list once, however often it comes; whatever is not
// Resend's — unsigned, signed with another secret, replayed from long
// ago, not an event, too large, about no message of ours, for a provider
// not configured — is refused and changes nothing.
func TestResendWebhookRecordsABounceOnce(t *testing.T) {
	t.Parallel()
	s, secret := hookStack(t)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	s.sentVia(t, o, "4ef9a417-02e9-4d39-ad75-9611e0fcc33c")
	now := time.Now()
	body := resendBounce("4ef9a417-02e9-4d39-ad75-9611e0fcc33c", "Ana Maria <ana.maria@example.com>", now)

	refused := []struct {
		name   string
		res    func() response
		status int
		detail string // what a 400 says was wrong, in the sender's terms
	}{
		{"unsigned", func() response {
			return s.do(t, http.MethodPost, "/v1/webhooks/resend", "application/json", strings.NewReader(body), map[string]string{"Authorization": ""})
		}, http.StatusUnauthorized, ""},
		{"another secret", func() response {
			return s.resendHook(t, "whsec_"+base64.StdEncoding.EncodeToString([]byte("not the configured secret")), "msg_1", now, body)
		}, http.StatusUnauthorized, ""},
		{"replayed an hour later", func() response { return s.resendHook(t, secret, "msg_1", now.Add(-time.Hour), body) }, http.StatusUnauthorized, ""},
		{"not an event", func() response { return s.resendHook(t, secret, "msg_2", now, `{"hello":"world"}`) }, http.StatusBadRequest, "no type"},
		{"not JSON", func() response { return s.resendHook(t, secret, "msg_6", now, `{"type":`) }, http.StatusBadRequest, "not valid JSON"},
		{"a field of the wrong type", func() response {
			return s.resendHook(t, secret, "msg_7", now, `{"type":"email.bounced","data":{"email_id":7}}`)
		}, http.StatusBadRequest, "data.email_id must be a JSON string, not number"},
		{"nested too deep", func() response {
			return s.resendHook(t, secret, "msg_8", now, `{"type":"email.bounced","data":`+strings.Repeat("[", 60_000)+`}`)
		}, http.StatusBadRequest, "more than 32 levels deep"},
		{"too large", func() response {
			return s.resendHook(t, secret, "msg_3", now, `{"type":"email.bounced","pad":"`+strings.Repeat("x", 2<<20)+`"}`)
		}, http.StatusRequestEntityTooLarge, ""},
		{"not our message", func() response {
			return s.resendHook(t, secret, "msg_4", now, resendBounce("b1a5c0de-0000-4000-8000-000000000000", "someone@example.com", now))
		}, http.StatusUnprocessableEntity, ""},
		{"unconfigured provider", func() response { return s.resendHook(t, secret, "msg_5", now, body) }, 0, ""},
	}
	for _, c := range refused {
		if c.status == 0 {
			res := s.do(t, http.MethodPost, "/v1/webhooks/mailgun", "application/json", strings.NewReader(body), map[string]string{"Authorization": ""})
			if res.status != http.StatusNotFound {
				t.Errorf("%s: %d %s", c.name, res.status, res.body)
			}
			continue
		}
		res := c.res()
		if res.status != c.status || !strings.HasPrefix(res.header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s: %d %s, want %d as problem+json", c.name, res.status, res.body, c.status)
		}
		if c.status == http.StatusUnauthorized && res.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: a 401 without WWW-Authenticate", c.name)
		}
		if c.detail != "" {
			var p struct{ Detail string }
			res.decode(t, &p)
			if !strings.Contains(p.Detail, c.detail) || strings.ContainsAny(p.Detail, "*") ||
				strings.Contains(p.Detail, "resend:") || strings.Contains(p.Detail, "httpapi") || strings.Contains(p.Detail, "json:") {
				t.Errorf("%s: detail %q; want it to say %q, with no package names or Go types", c.name, p.Detail, c.detail)
			}
		}
	}
	if n := s.count(t, "provider_events") + s.count(t, "suppressions"); n != 0 {
		t.Fatalf("refused requests wrote %d rows", n)
	}
	// The body declared too large is refused before the webhook reads
	// it (bodyFirst, without 100 Continue): the HTTP metrics count it,
	// not the provider's.
	if n := s.counter(t, "sekali_provider_events_total", "provider", "resend", "result", "rejected"); n != 7 {
		t.Errorf("rejected = %v, want 7", n)
	}
	if n := s.counter(t, "sekali_provider_events_total", "provider", "resend", "result", "unknown_message"); n != 1 {
		t.Errorf("unknown_message = %v, want 1", n)
	}

	for i := range 3 { // Svix retries until it gets a 2xx; the same svix-id each time
		res := s.resendHook(t, secret, "msg_bounce", now, body)
		want := `{"duplicates":0,"recorded":1}`
		if i > 0 {
			want = `{"duplicates":1,"recorded":0}`
		}
		if res.status != http.StatusOK || strings.TrimSpace(string(res.body)) != want {
			t.Errorf("delivery #%d: %d %s, want %s", i+1, res.status, res.body, want)
		}
	}
	s.checkBounceRecordedOnce(t, "resend")
}

// Postmark authenticates its webhooks with Basic credentials: wrong ones
// get a Basic challenge; right ones record the event.
func TestPostmarkWebhookNeedsItsCredentials(t *testing.T) {
	t.Parallel()
	s, _ := hookStack(t)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	s.sentVia(t, o, "883953f4-6105-42a2-a16a-77a8eac79483")
	body := `{"RecordType":"SpamComplaint","ID":42,"Type":"SpamComplaint","TypeCode":512,"MessageID":"883953f4-6105-42a2-a16a-77a8eac79483",` +
		`"Email":"ana.maria@example.com","BouncedAt":"2026-12-01T10:00:00Z","Details":"complaint"}`
	basic := func(user, password string) map[string]string {
		return map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))}
	}
	for name, header := range map[string]map[string]string{
		"none":           {"Authorization": ""},
		"wrong password": basic(postmarkUser, "not-the-password-at-all"),
		"wrong user":     basic("someone", postmarkPassword),
	} {
		res := s.do(t, http.MethodPost, "/v1/webhooks/postmark", "application/json", strings.NewReader(body), header)
		if res.status != http.StatusUnauthorized || !strings.HasPrefix(res.header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("%s credentials: %d %q %s", name, res.status, res.header.Get("WWW-Authenticate"), res.body)
		}
	}
	if n := s.count(t, "suppressions"); n != 0 {
		t.Fatalf("%d suppressions before an authenticated event", n)
	}
	res := s.do(t, http.MethodPost, "/v1/webhooks/postmark", "application/json", strings.NewReader(body), basic(postmarkUser, postmarkPassword))
	if res.status != http.StatusOK {
		t.Fatalf("authenticated: %d %s", res.status, res.body)
	}
	res = s.admin(t, http.MethodGet, "/admin/v1/suppressions", "")
	if !strings.Contains(string(res.body), `"recipient":"ana.maria@example.com","source":"complaint"`) {
		t.Errorf("after a complaint: %s", res.body)
	}
}

// Operators add an address by hand, with a reason; list, look up and lift
// it, with a note; the record keeps both. Bad input is a problem.
func TestAdminSuppressions(t *testing.T) {
	t.Parallel()
	s := setup(t)
	// In order: the first addition is 201, the second 200.
	steps := []struct {
		body string
		want int
	}{
		{`{"recipient":"Budi+Shop@Example.com","note":"asked not to be e-mailed, ticket 77"}`, http.StatusCreated},
		{`{"recipient":"budi+shop@example.com","note":"again"}`, http.StatusOK},
		{`{"recipient":"not an address","note":"x"}`, http.StatusUnprocessableEntity},
		{`{"recipient":"a@example.com","note":"  "}`, http.StatusUnprocessableEntity},
		{`{"recipient":"a@example.com","note":"x","extra":1}`, http.StatusBadRequest},
	}
	for _, st := range steps {
		if res := s.admin(t, http.MethodPost, "/admin/v1/suppressions", st.body); res.status != st.want {
			t.Errorf("POST %s: %d %s, want %d", st.body, res.status, res.body, st.want)
		}
	}
	res := s.admin(t, http.MethodGet, "/admin/v1/suppressions", "")
	if strings.Count(string(res.body), `"recipient"`) != 1 || !strings.Contains(string(res.body), `"source":"operator"`) {
		t.Errorf("list: %s", res.body)
	}
	path := "/admin/v1/suppressions/" + url.PathEscape("budi+shop@example.com")
	if res := s.admin(t, http.MethodDelete, path, ""); res.status != http.StatusBadRequest {
		t.Errorf("lifting without a note: %d %s", res.status, res.body)
	}
	escaped := "/admin/v1/suppressions/budi%2Bshop%40example.com?note=" + url.QueryEscape("customer asked again, ticket 78")
	if res := s.admin(t, http.MethodDelete, escaped, ""); res.status != http.StatusNoContent {
		t.Errorf("lifting: %d %s", res.status, res.body)
	}
	if res := s.admin(t, http.MethodGet, path, ""); res.status != http.StatusNotFound {
		t.Errorf("after lifting: %d %s", res.status, res.body)
	}
	if res := s.admin(t, http.MethodDelete, escaped, ""); res.status != http.StatusNotFound {
		t.Errorf("lifting twice: %d %s", res.status, res.body)
	}
	var added, removed int
	if err := s.db.Pool.QueryRow(context.Background(),
		"SELECT count(*) FILTER (WHERE action = 'added'), count(*) FILTER (WHERE action = 'removed') FROM suppression_events").Scan(&added, &removed); err != nil {
		t.Fatal(err)
	}
	if added != 1 || removed != 1 {
		t.Errorf("history: %d added, %d removed, want 1 and 1", added, removed)
	}
}

// checkBounceRecordedOnce checks what a bounce of ana.maria@example.com
// that provider reported, however many times, leaves: one provider
// event, one bounce counted, and the address suppressed by provider.
func (s stack) checkBounceRecordedOnce(t *testing.T, provider string) {
	t.Helper()
	if n := s.count(t, "provider_events"); n != 1 {
		t.Errorf("%d provider events, want 1", n)
	}
	if n := s.counter(t, "sekali_delivery_feedback_total", "provider", provider, "kind", "bounced"); n != 1 {
		t.Errorf("feedback bounced = %v, want 1", n)
	}
	res := s.admin(t, http.MethodGet, "/admin/v1/suppressions/"+url.PathEscape("ana.maria@example.com"), "")
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"source":"bounce"`) || !strings.Contains(string(res.body), `"actor":"`+provider+`"`) {
		t.Errorf("the suppression: %d %s", res.status, res.body)
	}
}

// checkSignatureRefused checks that the webhook request called name was
// refused with status as problem+json, and a 401 with the challenge of
// the providers that sign their requests.
func checkSignatureRefused(t *testing.T, name string, res response, status int) {
	t.Helper()
	if res.status != status || !strings.HasPrefix(res.header.Get("Content-Type"), "application/problem+json") {
		t.Errorf("%s: %d %s, want %d as problem+json", name, res.status, res.body, status)
	}
	if status == http.StatusUnauthorized && res.header.Get("WWW-Authenticate") != `Signature realm="sekali-webhooks"` {
		t.Errorf("%s: WWW-Authenticate %q", name, res.header.Get("WWW-Authenticate"))
	}
}

const mailgunKey = "key-5b2d8c1f9e4a7d3b6c0e1f2a3b4c5d6e"

// mailgunSigned is a webhook body as Mailgun signs it: the hex
// HMAC-SHA256, keyed with the webhook signing key, of the timestamp and
// the token, next to the event-data (which the signature does not cover).
func mailgunSigned(key string, at time.Time, token, eventData string) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(ts + token))
	return fmt.Sprintf(`{"signature":{"timestamp":%q,"token":%q,"signature":%q},"event-data":%s}`,
		ts, token, hex.EncodeToString(mac.Sum(nil)), eventData)
}

// mailgunFailure is Mailgun's event-data of a permanent failure of the
// message whose Message-Id is messageID.
func mailgunFailure(id, messageID, recipient string, at time.Time) string {
	return fmt.Sprintf(`{"id":%q,"event":"failed","severity":"permanent","reason":"bounce","timestamp":%d.25,`+
		`"recipient":%q,"message":{"headers":{"message-id":"<%s>"}},`+
		`"delivery-status":{"code":550,"message":"5.1.1 The email account that you tried to reach does not exist","description":""}}`,
		id, at.Unix(), recipient, messageID)
}

// A permanent failure that Mailgun signs reaches the delivery's history
// and the suppression list once: Mailgun's retry of the event, signed
// anew, is a duplicate, and the same signature again is refused. What
// Mailgun did not sign — no signature, another key, a token the
// signature is not of, an old timestamp — is 401 with a challenge; a body
// that is no event is 400, an event about no message of ours 422; none
// of them writes anything.
func TestMailgunWebhookRecordsAFailureOnce(t *testing.T) {
	t.Parallel()
	s := configuredStack(t, map[string]string{"MAILGUN_WEBHOOK_SIGNING_KEY": mailgunKey})
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	const messageID = "20261201101500.5f3c9a@shop.example"
	s.sentVia(t, o, messageID)
	now := time.Now()
	event := mailgunFailure("Ase7i2zsRYeDXztHGENqRA", messageID, "ana.maria@example.com", now)
	post := func(body string) response {
		return s.do(t, http.MethodPost, "/v1/webhooks/mailgun", "application/json", strings.NewReader(body), map[string]string{"Authorization": ""})
	}
	token := func(n int) string { return fmt.Sprintf("%050d", n) }

	tampered := strings.Replace(mailgunSigned(mailgunKey, now, token(1), event), token(1), token(2), 1)
	for _, c := range []struct {
		name, body string
		status     int
	}{
		{"unsigned", `{"event-data":` + event + `}`, http.StatusUnauthorized},
		{"another key", mailgunSigned("key-not-the-configured-one-at-all", now, token(3), event), http.StatusUnauthorized},
		{"a token the signature is not of", tampered, http.StatusUnauthorized},
		{"signed an hour ago", mailgunSigned(mailgunKey, now.Add(-time.Hour), token(4), event), http.StatusUnauthorized},
		{"not an event", mailgunSigned(mailgunKey, now, token(5), `{"hello":"world"}`), http.StatusBadRequest},
		{"not our message", mailgunSigned(mailgunKey, now, token(6), mailgunFailure("ev-other", "someone-else@shop.example", "x@example.com", now)), http.StatusUnprocessableEntity},
	} {
		checkSignatureRefused(t, c.name, post(c.body), c.status)
	}
	if n := s.count(t, "provider_events") + s.count(t, "suppressions"); n != 0 {
		t.Fatalf("refused webhooks wrote %d rows", n)
	}
	if n := s.counter(t, "sekali_provider_events_total", "provider", "mailgun", "result", "rejected"); n != 5 {
		t.Errorf("rejected = %v, want 5", n)
	}

	signed := mailgunSigned(mailgunKey, now, token(7), event)
	if res := post(signed); res.status != http.StatusOK || strings.TrimSpace(string(res.body)) != `{"duplicates":0,"recorded":1}` {
		t.Fatalf("the signed failure: %d %s", res.status, res.body)
	}
	// Mailgun retries an event until it gets a 2xx, signing each attempt.
	if res := post(mailgunSigned(mailgunKey, now.Add(time.Second), token(8), event)); res.status != http.StatusOK || strings.TrimSpace(string(res.body)) != `{"duplicates":1,"recorded":0}` {
		t.Errorf("Mailgun's retry: %d %s", res.status, res.body)
	}
	if res := post(signed); res.status != http.StatusUnauthorized {
		t.Errorf("the same signature again: %d %s, want 401", res.status, res.body)
	}
	s.checkBounceRecordedOnce(t, "mailgun")
}

const sesTopic = "arn:aws:sns:us-east-1:123456789012:ses-feedback"

// snsMessage is an SNS notification carrying an SES bounce of the message
// whose Message-ID is messageID, with the signature fields to be set.
func snsMessage(messageID string, at time.Time) map[string]string {
	record := `{"eventType":"Bounce","bounce":{"bounceType":"Permanent","bounceSubType":"General",` +
		`"bouncedRecipients":[{"emailAddress":"ana.maria@example.com","diagnosticCode":"smtp; 550 5.1.1 user unknown"}],` +
		`"timestamp":"` + at.UTC().Format(time.RFC3339) + `"},"mail":{"timestamp":"` + at.UTC().Format(time.RFC3339) + `",` +
		`"source":"orders@shop.example","messageId":"0100018c-ses-id","destination":["ana.maria@example.com"],` +
		`"commonHeaders":{"messageId":"<` + messageID + `>"}}}`
	return map[string]string{
		"Type": "Notification", "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324", "TopicArn": sesTopic,
		"Subject": "Amazon SES Email Event Notification", "Message": record, "Timestamp": at.UTC().Format("2006-01-02T15:04:05.000Z"),
		"SignatureVersion": "2", "Signature": base64.StdEncoding.EncodeToString([]byte("not SNS's signature")),
		"SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000000000000000000000.pem",
	}
}

// What SNS did not sign for our topic is refused before anything of its
// Message is believed, and before any certificate is fetched: a
// signature version SNS does not use, a signature that is not one, a
// certificate URL that is not https on an SNS host (a look-alike host,
// plain http, credentials in it). A body that is not an SNS message is
// 400. None writes anything.
func TestSESWebhookRefusesWhatSNSDidNotSign(t *testing.T) {
	t.Parallel()
	s := configuredStack(t, map[string]string{"SES_SNS_TOPIC_ARNS": sesTopic})
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	const messageID = "20261201101500.5f3c9a@shop.example"
	s.sentVia(t, o, "0100018c-ses-id")
	now := time.Now()
	with := func(field, value string) string {
		m := snsMessage(messageID, now)
		m[field] = value
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, c := range []struct {
		name, body string
		status     int
	}{
		{"no signature", with("Signature", ""), http.StatusUnauthorized},
		{"signature version 3", with("SignatureVersion", "3"), http.StatusUnauthorized},
		{"a signature that is not base64", with("Signature", "%%%"), http.StatusUnauthorized},
		{"a look-alike certificate host", with("SigningCertURL", "https://sns.us-east-1.amazonaws.com.attacker.example/cert.pem"), http.StatusUnauthorized},
		{"a certificate over http", with("SigningCertURL", "http://sns.us-east-1.amazonaws.com/cert.pem"), http.StatusUnauthorized},
		{"credentials in the certificate URL", with("SigningCertURL", "https://user:pw@sns.us-east-1.amazonaws.com/cert.pem"), http.StatusUnauthorized},
		{"another port", with("SigningCertURL", "https://sns.us-east-1.amazonaws.com:8443/cert.pem"), http.StatusUnauthorized},
		{"not an SNS message type", with("Type", "Gossip"), http.StatusBadRequest},
		{"not JSON", `{"Type":`, http.StatusBadRequest},
	} {
		res := s.do(t, http.MethodPost, "/v1/webhooks/ses", "text/plain; charset=UTF-8", strings.NewReader(c.body), map[string]string{"Authorization": ""})
		checkSignatureRefused(t, c.name, res, c.status)
	}
	if n := s.count(t, "provider_events") + s.count(t, "suppressions"); n != 0 {
		t.Errorf("refused SNS messages wrote %d rows", n)
	}
	if n := s.counter(t, "sekali_provider_events_total", "provider", "ses", "result", "rejected"); n != 9 {
		t.Errorf("rejected = %v, want 9", n)
	}
	if res := s.do(t, http.MethodPost, "/v1/webhooks/mailgun", "application/json", strings.NewReader(`{}`), map[string]string{"Authorization": ""}); res.status != http.StatusNotFound {
		t.Errorf("an unconfigured provider: %d %s", res.status, res.body)
	}
}
