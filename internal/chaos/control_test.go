package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/smtpsink"
)

// naiveHandler is the case study's bug, kept here to prove the suite can
// fail: it checks the status, sends, and only then saves — no lock, no
// claim, no fencing, every error retried. Test-only; never in a binary.
type naiveHandler struct {
	c         *cluster
	provider  *smtp.Provider
	templates *mailtemplate.Templates
}

func (h naiveHandler) ProcessTask(ctx context.Context, task *asynq.Task) error {
	var p struct {
		DeliveryID uuid.UUID `json:"delivery_id"`
	}
	if err := json.Unmarshal(task.Payload(), &p); err != nil {
		return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
	}
	d, err := notify.Get(ctx, h.c.db.Pool, p.DeliveryID)
	if err != nil {
		return err
	}
	if d.Status == notify.StatusSent {
		return nil
	}
	r, err := h.templates.Render(d.Template, d.Data)
	if err != nil {
		return err
	}
	id, err := h.provider.Send(ctx, mail.Message{To: d.Recipient, Subject: r.Subject, Text: r.Text, HTML: r.HTML,
		MessageID: mail.MessageID(d.IdempotencyKey, mailDomain), IdempotencyKey: d.IdempotencyKey}, func() error { return nil })
	if err != nil {
		return err // retried, whatever the provider may have done
	}
	// The naive code writes its own status, as such code does: this is
	// the control's behaviour under test, not state made for a test.
	_, err = h.c.db.Pool.Exec(ctx, "UPDATE notification_deliveries SET status = 'sent', sent_at = now(), provider_message_id = $2 WHERE id = $1", d.ID, id)
	return err
}

func (c *cluster) startNaiveWorker() {
	c.t.Helper()
	if err := c.naiveWorker()(); err != nil {
		c.t.Fatal(err)
	}
}

// naiveWorker makes a naive worker and returns what starts it.
func (c *cluster) naiveWorker() (start func() error) {
	c.t.Helper()
	templates, err := mailtemplate.LoadBuiltin()
	if err != nil {
		c.t.Fatal(err)
	}
	p, err := smtp.New(smtp.Config{Host: c.sink.Host(), Port: c.sink.Port(), TLS: smtp.TLSNone,
		From: "orders@" + mailDomain, IdempotencyHeader: "Idempotency-Key", Timeout: 2 * time.Second, MaxIdle: 4})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(p.Close)
	srv := asynq.NewServer(c.redis.Opt, asynq.Config{Concurrency: 4, Queues: map[string]int{c.redis.Queue: 1},
		TaskCheckInterval: 20 * time.Millisecond, DelayedTaskCheckInterval: 100 * time.Millisecond,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return 200 * time.Millisecond }, LogLevel: asynq.FatalLevel})
	h := naiveHandler{c: c, provider: p, templates: templates}
	c.t.Cleanup(srv.Shutdown)
	return func() error { return srv.Start(h) }
}

// The control: the same faults against the naive handler must show up as
// duplicates. If they did not, the suite could not tell a broken service
// from a working one.
func TestControlNaiveHandlerSendsDuplicates(t *testing.T) {
	t.Parallel()
	t.Run("same task x10, 5 workers", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 50 * time.Millisecond }})
		c.startAPI()
		c.placeOrders("naive-tenfold", 5)
		client := asynq.NewClient(c.redis.Opt)
		defer client.Close()
		for _, o := range c.orders {
			for i := 0; i < 10; i++ {
				if _, err := client.Enqueue(queue.NewDeliverTask(notify.Delivery{ID: o.DeliveryID, IdempotencyKey: o.Key}), asynq.Queue(c.redis.Queue)); err != nil {
					t.Fatal(err)
				}
			}
		}
		// All five at once, so that they race for the same deliveries'
		// tasks: one started well before the others could send them all
		// alone, and the control would see nothing.
		var starts []func() error
		for i := 0; i < 5; i++ {
			starts = append(starts, c.naiveWorker())
		}
		errs := make([]error, len(starts))
		var wg sync.WaitGroup
		for i, start := range starts {
			wg.Go(func() { errs[i] = start() })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		c.settled(60 * time.Second)
		if r := c.verdict("CONTROL naive: same task x10, 5 workers", expect{control: true}); r.Duplicates == 0 {
			t.Error("the naive handler sent no duplicates: the suite cannot see the bug it exists for")
		}
	})
	t.Run("drops after DATA", func(t *testing.T) {
		t.Parallel()
		// Every first attempt to a recipient is accepted and then cut off;
		// the naive handler retries it blindly.
		var mu sync.Mutex
		seen := map[string]int{}
		c := newCluster(t, smtpsink.Config{DropAfterData: func(m *smtpsink.Message) bool {
			mu.Lock()
			defer mu.Unlock()
			seen[m.To[0]]++
			return seen[m.To[0]] == 1
		}})
		c.startAPI()
		c.startNaiveWorker()
		c.placeOrders("drop-naive", 5)
		c.settled(60 * time.Second)
		if r := c.verdict("CONTROL naive: drops after DATA", expect{control: true}); r.Duplicates == 0 {
			t.Error("the naive handler sent no duplicates after dropped connections")
		}
	})
}
