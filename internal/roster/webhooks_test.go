package roster_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/httpapi"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/notify/notifytest"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/roster"
	"github.com/sekali-dev/sekali/internal/testenv"
)

const (
	mailgunKey       = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"
	postmarkUser     = "postmark-hooks"
	postmarkPassword = "a-password-of-some-length"
)

// env is the API's webhooks, configured through the environment and
// opened over a database of the test's own as cmd/api opens them, and
// one confirmation the worker has sent.
type env struct {
	url string
	db  testenv.DB
	d   notify.Delivery
}

func setup(t *testing.T) env {
	t.Helper()
	db := testenv.NewDB(t)
	ctx := context.Background()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	queueRedisClient := redisconn.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"}) // the enqueue after the checkout fails; nothing here needs it
	t.Cleanup(func() { queueRedisClient.Close() })
	reg := prometheus.NewRegistry()
	orders := order.NewService(db.Pool, queue.NewEnqueuer(queueRedisClient, "webhooks-test", discard, reg), nil, time.Hour, reg)
	price := int64(100)
	o, err := orders.Place(ctx, order.Checkout{CustomerEmail: "Ana@Example.com", CustomerName: "Ana", Currency: "USD",
		Items: []order.CheckoutItem{{SKU: "A", Name: "A", Quantity: 1, UnitPrice: &price}}}, order.Caller{}, "")
	if err != nil {
		t.Fatal(err)
	}
	operator := notify.NewOperator(db.Pool, nil, nil, nil)
	// Sent as the worker records it, but without the provider's id: the
	// answer that carried it was lost, and the reconciler found the
	// message by our metadata.
	f := notifytest.New(t, db.Pool)
	d := f.Sent(f.Get(o.Notifications[0].ID), "")

	e := envconfig.New(func(k string) string {
		return map[string]string{
			"MAILGUN_WEBHOOK_SIGNING_KEY": mailgunKey,
			"POSTMARK_WEBHOOK_USER":       postmarkUser,
			"POSTMARK_WEBHOOK_PASSWORD":   postmarkPassword,
		}[k]
	})
	settings := roster.ReadWebhooks(e)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Deps{
		Log: discard, Registry: prometheus.NewRegistry(), Webhooks: settings.Open(mail.WebhookDeps{Tokens: operator, Log: discard}),
		Admin: httpapi.Admin{Ops: operator},
	}))
	t.Cleanup(srv.Close)
	return env{url: srv.URL, db: db, d: d}
}

func (e env) post(t *testing.T, name, body string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+"/v1/webhooks/"+name, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// count counts what feedback wrote: events, suppressions, history.
func (e env) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e env) written(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("provider_events=%d suppressions=%d feedback_history=%d",
		e.count(t, "SELECT count(*) FROM provider_events"), e.count(t, "SELECT count(*) FROM suppressions"),
		e.count(t, "SELECT count(*) FROM delivery_events WHERE actor IN ('mailgun', 'postmark')"))
}

// mailgunSigned is a webhook body as Mailgun signs it: the hex
// HMAC-SHA256 of timestamp and token, nothing of the event-data.
func mailgunSigned(ts int64, token, eventData string) string {
	mac := hmac.New(sha256.New, []byte(mailgunKey))
	fmt.Fprintf(mac, "%d%s", ts, token)
	return fmt.Sprintf(`{"signature":{"timestamp":"%d","token":%q,"signature":%q},"event-data":%s}`,
		ts, token, hex.EncodeToString(mac.Sum(nil)), eventData)
}

func mailgunEvent(id, event, severity, messageID string) string {
	return fmt.Sprintf(`{"id":%q,"event":%q,"severity":%q,"reason":"bounce","timestamp":%d,"recipient":"ana@example.com",
"message":{"headers":{"message-id":"<%s>"}},"delivery-status":{"code":550,"message":"5.1.1 no such user","description":""}}`,
		id, event, severity, time.Now().Unix(), messageID)
}

// Mailgun signs a timestamp and a token, not the event: a signature
// captured from one webhook is refused with any other event-data (say a
// permanent failure, which would suppress the address) and even with its
// own, and so is the token of an event the API ignores. Nothing refused
// is recorded; a webhook with a fresh token is. Tokens past their
// signature's age are pruned by the next insert.
func TestMailgunTokenCountsOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ts := time.Now().Unix()
	first, ignored, fresh := strings.Repeat("a1", 25), strings.Repeat("b2", 25), strings.Repeat("c3", 25)
	mid := e.d.MessageID

	if _, err := e.db.Pool.Exec(context.Background(),
		"INSERT INTO webhook_tokens (provider, token, expires_at) VALUES ('mailgun', 'expired-long-ago', now() - interval '1 hour')"); err != nil {
		t.Fatal(err)
	}
	deferred := mailgunSigned(ts, first, mailgunEvent("ev-deferred", "failed", "temporary", mid))
	if status, body := e.post(t, "mailgun", deferred, nil); status != http.StatusOK || !strings.Contains(body, `"recorded":1`) {
		t.Fatalf("a signed webhook: %d %s", status, body)
	}
	if n := e.count(t, "SELECT count(*) FROM webhook_tokens WHERE token = 'expired-long-ago'"); n != 0 {
		t.Errorf("an expired token was kept after the next insert")
	}
	before := e.written(t)

	for _, c := range []struct{ name, body string }{
		{"its signature with a forged permanent failure", mailgunSigned(ts, first, mailgunEvent("ev-forged", "failed", "permanent", mid))},
		{"its signature with its own event again", deferred},
	} {
		status, body := e.post(t, "mailgun", c.body, nil)
		if status != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", c.name, status, body)
		}
	}
	if status, body := e.post(t, "mailgun", mailgunSigned(ts, ignored, mailgunEvent("ev-opened", "opened", "", mid)), nil); status != http.StatusOK {
		t.Fatalf("an ignored event: %d %s", status, body)
	}
	if status, body := e.post(t, "mailgun", mailgunSigned(ts, ignored, mailgunEvent("ev-forged-2", "failed", "permanent", mid)), nil); status != http.StatusUnauthorized {
		t.Errorf("the token of an ignored event with a forged permanent failure: %d %s, want 401", status, body)
	}
	if after := e.written(t); after != before {
		t.Fatalf("refused webhooks wrote: %s, was %s", after, before)
	}

	bounce := mailgunSigned(ts, fresh, mailgunEvent("ev-bounce", "failed", "permanent", mid))
	if status, body := e.post(t, "mailgun", bounce, nil); status != http.StatusOK || !strings.Contains(body, `"recorded":1`) {
		t.Fatalf("a permanent failure with a fresh token: %d %s", status, body)
	}
	if n := e.count(t, "SELECT count(*) FROM suppressions WHERE recipient = 'ana@example.com'"); n != 1 {
		t.Errorf("%d suppressions after a genuine permanent failure, want 1", n)
	}
}

func postmarkBounce(id int, messageID, keyHash string) string {
	return fmt.Sprintf(`{"RecordType":"Bounce","ID":%d,"Type":"HardBounce","MessageID":%q,"Email":"ana@example.com",
"BouncedAt":%q,"Description":"The server was unable to deliver your message","Details":"550 5.1.1 no such user",
"Inactive":true,"Metadata":{"sekali-key":%q}}`, id, messageID, time.Now().UTC().Format(time.RFC3339), keyHash)
}

// An event that names neither a provider's id we stored nor our
// Message-ID is matched by the key hash our metadata carried: here a
// Postmark bounce of a message whose Postmark id the worker never
// stored. A key hash of no delivery of ours matches nothing.
func TestFeedbackMatchedByKeyHashAlone(t *testing.T) {
	t.Parallel()
	e := setup(t)
	auth := http.Header{}
	auth.Set("Authorization", "Basic "+basic(postmarkUser, postmarkPassword))

	stranger := postmarkBounce(1, "0a129aee-e1cd-480d-b08d-4f48548ff48d", mail.KeyHash("order-confirmation:not-ours:someone@example.com"))
	if status, body := e.post(t, "postmark", stranger, auth); status != http.StatusUnprocessableEntity {
		t.Errorf("a key hash of no delivery: %d %s, want 422", status, body)
	}
	bounce := postmarkBounce(2, "b7bc2f4a-e38e-4336-af7d-e6c392c2f817", mail.KeyHash(e.d.IdempotencyKey))
	if status, body := e.post(t, "postmark", bounce, auth); status != http.StatusOK || !strings.Contains(body, `"recorded":1`) {
		t.Fatalf("a bounce matched by its key hash alone: %d %s", status, body)
	}
	if n := e.count(t, "SELECT count(*) FROM delivery_events WHERE delivery_id = $1 AND event = 'bounced' AND actor = 'postmark'", e.d.ID); n != 1 {
		t.Errorf("%d bounced events in the delivery's history, want 1", n)
	}
	if n := e.count(t, "SELECT count(*) FROM provider_events WHERE delivery_id = $1", e.d.ID); n != 1 {
		t.Errorf("%d provider events of the delivery, want 1", n)
	}
	if n := e.count(t, "SELECT count(*) FROM suppressions WHERE recipient = 'ana@example.com'"); n != 1 {
		t.Errorf("%d suppressions after the hard bounce, want 1", n)
	}
}

func basic(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}
