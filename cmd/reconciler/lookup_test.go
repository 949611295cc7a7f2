package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailgun/mailguntest"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/notify/notifytest"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/postmark/postmarktest"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
)

const recipient = "ana.maria@example.com"

// stalled is a reconciler's world with one confirmation, to recipient,
// whose worker handed it to the provider two hours ago and stopped: a
// sending row with an expired lease, which only a look-up can settle.
type stalled struct {
	db  testenv.DB
	env map[string]string
	d   notify.Delivery
}

func newStalled(t *testing.T) stalled {
	t.Helper()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	dead := redisconn.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { dead.Close() })
	reg := prometheus.NewRegistry()
	orders := order.NewService(db.Pool, queue.NewEnqueuer(dead, rd.Queue, slog.New(slog.NewTextHandler(io.Discard, nil)), reg), nil, time.Hour, reg)
	price := int64(100)
	o, err := orders.Place(ctx, order.Checkout{CustomerEmail: recipient, CustomerName: "Ana", Currency: "USD",
		Items: []order.CheckoutItem{{SKU: "A", Name: "A", Quantity: 1, UnitPrice: &price}}}, order.Caller{}, "")
	if err != nil {
		t.Fatal(err)
	}
	// Its worker handed it over two hours ago and died.
	f := notifytest.New(t, db.Pool)
	d := f.Aged(f.HandedOver(f.Get(o.Notifications[0].ID), time.Minute).Delivery, 2*time.Hour)
	return stalled{db: db, d: d, env: map[string]string{
		"DATABASE_URL": db.URL, "REDIS_URL": rd.URL, "DELIVERY_QUEUE": rd.Queue,
		"MAIL_FROM": "orders@shop.example", "RECONCILE_DEFAULT_POLICY": "hold",
	}}
}

// once runs reconciler --once and returns its log.
func (s stalled) once(t *testing.T, env map[string]string) string {
	t.Helper()
	for k, v := range s.env {
		env[k] = v
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"--once"}, func(k string) string { return env[k] }, &stdout, &stderr); err != nil {
		t.Fatalf("run --once: %v\n%s", err, stderr.String())
	}
	return stderr.String()
}

func (s stalled) status(t *testing.T) (status, providerID string) {
	t.Helper()
	var pid *string
	if err := s.db.Pool.QueryRow(context.Background(), "SELECT status, provider_message_id FROM notification_deliveries WHERE id = $1", s.d.ID).
		Scan(&status, &pid); err != nil {
		t.Fatal(err)
	}
	if pid != nil {
		providerID = *pid
	}
	return status, providerID
}

// PROVIDER=postmark settles an ambiguous send by searching Postmark's
// messages for our metadata, PROVIDER=mailgun by Mailgun's events for
// our Message-ID: each finds the message at its own provider, and only
// there, and the delivery becomes sent. Any other look-up, or none (the
// policy would hold it), leaves it otherwise.
func TestProviderChoosesItsLookup(t *testing.T) {
	t.Parallel()
	t.Run("postmark", func(t *testing.T) {
		t.Parallel()
		s := newStalled(t)
		pm := postmarktest.NewServer()
		defer pm.Close()
		id := pm.Add(postmarktest.Message{To: recipient, Metadata: map[string]string{"sekali-key": mail.KeyHash(s.d.IdempotencyKey)},
			ReceivedAt: time.Now().Add(-2 * time.Hour)})
		log := s.once(t, map[string]string{"PROVIDER": "postmark", "POSTMARK_SERVER_TOKEN": pm.Token, "POSTMARK_BASE_URL": pm.URL})
		if status, pid := s.status(t); status != "sent" || pid != id {
			t.Errorf("after the look-up: %s, provider id %q, want sent as %s\n%s", status, pid, id, log)
		}
		if pm.Requests("/messages/outbound") == 0 {
			t.Error("Postmark's Messages API was not searched")
		}
	})
	t.Run("mailgun", func(t *testing.T) {
		t.Parallel()
		s := newStalled(t)
		mg := mailguntest.NewServer("mg.shop.example")
		defer mg.Close()
		mg.AddEvent(mailguntest.Event{Event: "accepted", MessageID: s.d.MessageID, Recipient: recipient, Timestamp: time.Now().Add(-2 * time.Hour)})
		log := s.once(t, map[string]string{"PROVIDER": "mailgun", "MAILGUN_API_KEY": mg.APIKey, "MAILGUN_DOMAIN": mg.Domain, "MAILGUN_BASE_URL": mg.URL})
		if status, pid := s.status(t); status != "sent" || pid != s.d.MessageID {
			t.Errorf("after the look-up: %s, provider id %q, want sent as %s\n%s", status, pid, s.d.MessageID, log)
		}
		if mg.Requests("events") == 0 {
			t.Error("Mailgun's Events API was not searched")
		}
		// The decision's log line keeps the delivery's Message-ID, which
		// looks like an address but is none.
		if !strings.Contains(log, `"decision":"found_at_provider"`) || !strings.Contains(log, s.d.MessageID) {
			t.Errorf("no decision log line naming %s:\n%s", s.d.MessageID, log)
		}
	})
}

// A provider's answer to a look-up may quote the recipient's address;
// the reconciler's log line about the failed look-up carries the answer
// without it (the worker's logs are scrubbed the same way:
// TestProviderRepliesAreScrubbedOfAddressesInLogs).
func TestLookupRepliesAreScrubbedOfAddressesInLogs(t *testing.T) {
	t.Parallel()
	reply := "Invalid 'recipient' address: '" + recipient + "'."
	for _, c := range []struct {
		provider string
		env      func(t *testing.T) map[string]string
	}{
		{"postmark", func(t *testing.T) map[string]string {
			pm := postmarktest.NewServer()
			t.Cleanup(pm.Close)
			pm.FailNext("/messages/outbound", postmarktest.Fault{Status: 422, ErrorCode: 300, Message: reply})
			return map[string]string{"PROVIDER": "postmark", "POSTMARK_SERVER_TOKEN": pm.Token, "POSTMARK_BASE_URL": pm.URL}
		}},
		{"mailgun", func(t *testing.T) map[string]string {
			mg := mailguntest.NewServer("mg.shop.example")
			t.Cleanup(mg.Close)
			mg.FailNext("events", mailguntest.Fault{Status: 400, Message: reply})
			return map[string]string{"PROVIDER": "mailgun", "MAILGUN_API_KEY": mg.APIKey, "MAILGUN_DOMAIN": mg.Domain, "MAILGUN_BASE_URL": mg.URL}
		}},
	} {
		t.Run(c.provider, func(t *testing.T) {
			t.Parallel()
			s := newStalled(t)
			log := s.once(t, c.env(t))
			if !strings.Contains(log, `"decision":"lookup_failed"`) || !strings.Contains(log, "Invalid 'recipient' address") {
				t.Fatalf("no log line with the failed look-up's answer:\n%s", log)
			}
			if strings.Contains(log, "ana.maria") {
				t.Errorf("a log line carries the address:\n%s", log)
			}
			if status, _ := s.status(t); status != "sending" {
				t.Errorf("after a failed look-up: %s, want still sending", status)
			}
		})
	}
}
