package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The three binaries as they ship, against a real mail server (Mailpit)
// as a shop runs one: STARTTLS with a certificate from the shop's own CA
// (SMTP_CA_FILE) and AUTH, and the reconciler's look-up left at its
// default (MAIL_LOOKUP_API=auto, which must recognise Mailpit). A
// checkout in English arrives once, with the stored Message-ID and the
// envelope and headers Mailpit accepted; then the delivery is made to
// look as if its worker died after handing the message over, and the
// reconciler settles it by asking Mailpit: sent, and still one e-mail.
func TestBinariesAgainstMailpit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	mp := testenv.StartMailpit(t, testenv.MailpitOptions{TLS: true, Auth: map[string]string{"shop": "s3cret-pass"}})

	env := func(extra ...string) map[string]string {
		m := map[string]string{"DATABASE_URL": db.URL, "REDIS_URL": rd.URL, "DELIVERY_QUEUE": rd.Queue,
			"MAIL_FROM": "orders@shop.example", "METRICS_ADDR": "127.0.0.1:0", "LOG_LEVEL": "info"}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	api := testenv.Start(t, "api", testenv.Binary(t, "./cmd/api"), env("HTTP_ADDR", "127.0.0.1:0", "RATE_LIMIT_PUBLIC", "0"))
	apiURL := "http://" + api.WaitLog(t, "api listening", "addr", 60*time.Second)
	worker := testenv.Start(t, "worker", testenv.Binary(t, "./cmd/worker"), env(
		"SMTP_HOST", mp.Host, "SMTP_PORT", strconv.Itoa(mp.Port), "SMTP_TLS", "starttls", "SMTP_CA_FILE", mp.CAFile,
		"SMTP_USERNAME", "shop", "SMTP_PASSWORD", "s3cret-pass", "SMTP_HELO", "worker-1.shop.example"))
	worker.WaitLog(t, "worker started", "worker_id", 60*time.Second)
	rec := testenv.Start(t, "reconciler", testenv.Binary(t, "./cmd/reconciler"), env(
		"RECONCILE_INTERVAL", "200ms", "MAIL_LOOKUP_URL", mp.URL, "LOCK_TTL", "2s"))
	if got := rec.WaitLog(t, "reconciler started", "providers", 60*time.Second); got != "smtp (look-up)" {
		t.Fatalf("reconciler started with providers=%q, want smtp (look-up): MAIL_LOOKUP_API=auto did not recognise Mailpit", got)
	}

	backendKey := newBackendKey(t, apikey.NewService(db.Pool))
	req, _ := http.NewRequest(http.MethodPost, apiURL+"/v1/orders", strings.NewReader(
		`{"customer_email":"Ana.Maria@Example.com","customer_name":"Ana Maria","currency":"IDR","locale":"en",`+
			`"items":[{"sku":"S","name":"Sambal","quantity":2,"unit_price":2500050}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+backendKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var o order.Order
	err = json.NewDecoder(res.Body).Decode(&o)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusCreated || len(o.Notifications) != 1 {
		t.Fatalf("checkout: %d %v %+v", res.StatusCode, err, o)
	}
	d := o.Notifications[0]
	sent := func() bool {
		got, err := notify.Get(ctx, db.Pool, d.ID)
		return err == nil && got.Status == notify.StatusSent
	}
	testenv.WaitFor(t, "the confirmation to be sent through Mailpit", 30*time.Second, sent)

	id := mail.MessageID(d.IdempotencyKey, "shop.example")
	msgs := mp.Messages(t)
	if len(msgs) != 1 || mp.CountByMessageID(t, id) != 1 {
		t.Fatalf("Mailpit holds %d messages, %d with Message-ID %s; want one", len(msgs), mp.CountByMessageID(t, id), id)
	}
	h := mp.Headers(t, msgs[0].ID)
	if got := h.Get("Idempotency-Key"); got != "" {
		t.Errorf("Idempotency-Key header %q: Mailpit deduplicates by no key, so none goes (SMTP_IDEMPOTENCY_HEADER is unset)", got)
	}
	if subject := h.Get("Subject"); !strings.Contains(subject, "order") {
		t.Errorf("subject %q: want the English template (the checkout's locale)", subject)
	}
	if got := h.Get("Received"); !strings.Contains(got, "worker-1.shop.example") {
		t.Errorf("Received %q: want the worker's SMTP_HELO name", got)
	}

	// The worker died after handing the message over: only asking Mailpit
	// tells that it was sent. No transition takes a row back from sent, so
	// this one is rewound by hand, on purpose.
	if _, err := db.Pool.Exec(ctx, `UPDATE notification_deliveries SET status = 'sending', sent_at = NULL,
		provider_message_id = NULL, lease_token = gen_random_uuid(), lease_expires_at = now() - interval '1 second',
		handed_over_at = now() - interval '40 seconds' WHERE id = $1`, d.ID); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the reconciler to find the message at Mailpit", 30*time.Second, sent)
	got, err := notify.Get(ctx, db.Pool, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ProviderMessageID != msgs[0].ID {
		t.Errorf("provider message id %q, want Mailpit's %q", got.ProviderMessageID, msgs[0].ID)
	}
	time.Sleep(time.Second) // a resend, had there been one, has arrived
	if n := mp.Count(t); n != 1 {
		t.Errorf("Mailpit holds %d messages after the reconciler's pass, want 1", n)
	}
}
