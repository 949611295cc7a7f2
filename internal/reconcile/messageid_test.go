package reconcile_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/reconcile"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
)

// The reconciler looks an ambiguous send up by the Message-ID the attempt
// stored, not one rebuilt from its own MAIL_FROM: a worker that sent from
// another domain (MAIL_FROM changed since, or the reconciler configured
// apart from the workers) put its own domain in the Message-ID, and the
// message is found — settled as sent, not sent a second time.
func TestLookupUsesTheStoredMessageID(t *testing.T) {
	t.Parallel()
	const workerDomain = "old-sender.example" // the reconciler's is mailDomain
	mp := testenv.StartMailpit(t, testenv.MailpitOptions{})
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	ctx := context.Background()

	// A real worker, sending as orders@old-sender.example through Mailpit.
	templates, err := mailtemplate.LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	p, err := smtp.New(smtp.Config{Host: mp.Host, Port: mp.Port, TLS: smtp.TLSNone,
		From: "orders@" + workerDomain, IdempotencyHeader: "Idempotency-Key", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	rdb := redisconn.NewClient(e.redis.Opt)
	t.Cleanup(func() { rdb.Close() })
	w := worker.New(e.db.Pool, rdb, worker.Only("smtp", p), templates, worker.Config{
		LockTTL: 5 * time.Second, MaxAge: time.Hour, ProbeInterval: time.Second, SendTimeout: 10 * time.Second,
		MessageIDDomain: workerDomain, WorkerID: "old-worker", Concurrency: 1,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), worker.NewMetrics(prometheus.NewRegistry()))

	d := e.pending(t, "ana@example.com")
	if err := w.ProcessTask(ctx, queue.NewDeliverTask(d)); err != nil {
		t.Fatal(err)
	}
	stored := e.get(t, d.ID).MessageID
	rebuilt := mail.MessageID(d.IdempotencyKey, mailDomain)
	if stored != mail.MessageID(d.IdempotencyKey, workerDomain) || mp.CountByMessageID(t, stored) != 1 || mp.CountByMessageID(t, rebuilt) != 0 {
		t.Fatalf("stored Message-ID %q; at Mailpit %d with it, %d with the reconciler's %q",
			stored, mp.CountByMessageID(t, stored), mp.CountByMessageID(t, rebuilt), rebuilt)
	}
	mailpitID := mp.ByRecipient(t, "ana@example.com")[0].ID

	// The worker died after the data, before it recorded sent. No
	// transition takes a row back from sent, so this one is rewound by
	// hand, on purpose.
	e.exec(t, `UPDATE notification_deliveries SET status = 'sending', sent_at = NULL, provider_message_id = NULL,
		lease_token = gen_random_uuid(), lease_expires_at = now() - interval '1 second',
		handed_over_at = now() - interval '40 seconds'
		WHERE id = $1`, d.ID)

	l, err := smtp.NewLookup(ctx, smtp.APIMailpit, mp.URL)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.reconciler(t, recOpts{lookup: l}).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decisions[reconcile.DecisionFound] != 1 || rep.Decisions[reconcile.DecisionNotFound] != 0 {
		t.Errorf("report %v, want the message found at the provider", rep)
	}
	got := e.get(t, d.ID)
	if got.Status != notify.StatusSent || got.ProviderMessageID != mailpitID || got.MessageID != stored {
		t.Errorf("delivery: status %s, provider id %q (Mailpit's %q), Message-ID %q; want sent under the stored Message-ID",
			got.Status, got.ProviderMessageID, mailpitID, got.MessageID)
	}
	if n := mp.Count(t); n != 1 {
		t.Errorf("%d messages at Mailpit, want 1", n)
	}
}
