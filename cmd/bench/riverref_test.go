package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

const refCheckout = `{"customer_email":"Ana@Example.com","customer_name":"Ana","currency":"IDR",` +
	`"items":[{"sku":"TEA-01","name":"Teh melati","quantity":2,"unit_price":4500000},{"sku":"CUP-02","name":"Cangkir","quantity":1,"unit_price":12500050}]}`

// The reference must do what sekali does for the benchmark to compare
// like with like: one order and one e-mail per checkout, a retry with the
// same Idempotency-Key answered from the first, the same Message-ID and
// Idempotency-Key header, and the job marked done.
func TestRiverReferenceSendsEachCheckoutOnceWithSekalisHeaders(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testenv.NewDB(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := migrateRiverRef(ctx, db.Pool, log); err != nil {
		t.Fatal(err)
	}
	sink, err := smtpsink.Start(smtpsink.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })

	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runRiverRefWorker(wctx, riverRefConfig{SMTPHost: sink.Host(), SMTPPort: sink.Port(), MailFrom: "orders@shop.example",
			MaxWorkers: 4, FetchCooldown: 20 * time.Millisecond, FetchPoll: 100 * time.Millisecond}, db.Pool, log)
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	jobs, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(handleRiverRefCheckout(db.Pool, jobs))
	t.Cleanup(api.Close)

	post := func(body, key string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}

	status, _, first := post(refCheckout, "k-1")
	if status != http.StatusCreated {
		t.Fatalf("checkout: %d %s", status, first)
	}
	var o order.Order
	if err := json.Unmarshal([]byte(first), &o); err != nil {
		t.Fatal(err)
	}
	key := notify.Key(order.TemplateConfirmation, o.ID, "ana@example.com")
	if o.Total != 21500050 || len(o.Items) != 2 || len(o.Notifications) != 1 || o.Notifications[0].IdempotencyKey != key {
		t.Errorf("answer %s: want the order, total 21500050, two lines and one notification with key %s", first, key)
	}
	if status, h, again := post(refCheckout, "k-1"); status != http.StatusCreated || again != first || h.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the same request and key again: %d %s (replayed %q), want 201 and the first answer", status, again, h.Get("Idempotent-Replayed"))
	}
	if status, _, body := post(strings.Replace(refCheckout, `"Ana"`, `"Budi"`, 1), "k-1"); status != http.StatusUnprocessableEntity {
		t.Errorf("the key with another request: %d %s, want 422", status, body)
	}
	if status, _, body := post(`{"customer_email":"not an address"}`, ""); status != http.StatusBadRequest {
		t.Errorf("an invalid checkout: %d %s, want 400", status, body)
	}
	if status, _, body := post(refCheckout, ""); status != http.StatusCreated {
		t.Fatalf("a second checkout, without a key: %d %s", status, body)
	}

	testenv.WaitFor(t, "two e-mails at the sink and both jobs completed", 10*time.Second, func() bool {
		var completed int
		err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&completed)
		return err == nil && completed == 2 && sink.Count() == 2
	})
	var orders int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&orders); err != nil || orders != 2 {
		t.Errorf("orders = %d (%v), want 2", orders, err)
	}
	var found bool
	for _, m := range sink.Messages() {
		if m.MessageID == mail.MessageID(key, "shop.example") {
			found = true
			if got := m.Header.Get("Idempotency-Key"); got != key {
				t.Errorf("Idempotency-Key header %q, want %q", got, key)
			}
			if !strings.Contains(m.Header.Get("Subject"), strings.ToUpper(o.ID.String()[:8])) {
				t.Errorf("subject %q does not name the order", m.Header.Get("Subject"))
			}
		}
	}
	if !found {
		t.Errorf("no message with sekali's Message-ID %s", mail.MessageID(key, "shop.example"))
	}

	// The same e-mail enqueued again is not a second job.
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		res, err := jobs.InsertTx(ctx, tx, confirmationArgs{OrderID: o.ID, Recipient: "ana@example.com", Data: json.RawMessage(`{}`)}, nil)
		if err == nil && !res.UniqueSkippedAsDuplicate {
			t.Error("a second job for the same order and recipient was inserted")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
