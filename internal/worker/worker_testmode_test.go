package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/worker"
)

// A test key's notifications never reach a provider, whatever the
// worker is configured with: with two real stand-ins in PROVIDERS (the
// SMTP sink first) and batches on, a test delivery to a real-looking
// address, alone and in a task of many with a live one, runs the whole
// state machine (claimed, handed over, sent, with the test provider's
// id) while the sink receives nothing of it, not even a connection for
// it; the live one reaches the sink. The attempts are counted by mode.
func TestATestDeliveryNeverReachesAProvider(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	w := e.worker(t, workerOpts{batches: true, providers: []worker.NamedProvider{
		{Name: "smtp", Provider: e.smtp(t)}, {Name: "smtp2", Provider: e.smtp(t)},
	}})
	testKey := order.Caller{Key: uuid.New(), Owner: uuid.New(), Test: true}
	place := func(caller order.Caller, email string) notify.Delivery {
		t.Helper()
		price := int64(150000)
		o, err := e.orders.Place(context.Background(), order.Checkout{
			CustomerEmail: email, CustomerName: "Budi", Currency: "IDR",
			Items: []order.CheckoutItem{{SKU: "KOPI-1", Name: "Kopi Toraja", Quantity: 2, UnitPrice: &price}},
		}, caller, "")
		if err != nil {
			t.Fatal(err)
		}
		return e.delivery(t, o.Notifications[0].IdempotencyKey)
	}

	alone := place(testKey, "budi@example.com")
	if !alone.Test {
		t.Fatalf("a test key's confirmation is recorded live: %+v", alone)
	}
	e.deliver(t, w, alone)
	if e.sink.Count() != 0 || e.sink.Connections() != 0 {
		t.Fatalf("a test delivery reached the provider: %d messages, %d connections", e.sink.Count(), e.sink.Connections())
	}
	got := e.delivery(t, alone.IdempotencyKey)
	if got.Status != notify.StatusSent || got.Provider != mail.TestProvider || !strings.HasPrefix(got.ProviderMessageID, "test_") || got.SentAt == nil {
		t.Errorf("the test delivery after its attempt: status %s, provider %q, id %q; want sent by the test provider", got.Status, got.Provider, got.ProviderMessageID)
	}
	_, events, err := e.ops.Get(context.Background(), alone.ID)
	if err != nil {
		t.Fatal(err)
	}
	var path []string
	for _, ev := range events {
		path = append(path, ev.Event)
	}
	if p := strings.Join(path, " "); !strings.Contains(p, "received claimed handed_over sent") {
		t.Errorf("the test delivery's history: %s; want the whole state machine", p)
	}

	// In one task with a live delivery: each goes its own way.
	test2, live := place(testKey, "ana@example.com"), place(order.Caller{}, "citra@example.com")
	if err := w.ProcessTask(context.Background(), queue.NewDeliveriesTask([]notify.Delivery{test2, live})); err != nil {
		t.Fatal(err)
	}
	if got := e.delivery(t, test2.IdempotencyKey); got.Status != notify.StatusSent || got.Provider != mail.TestProvider {
		t.Errorf("the test delivery of the task of many: %s at %q", got.Status, got.Provider)
	}
	if len(e.sink.ByRecipient("ana@example.com")) != 0 || len(e.sink.ByRecipient("budi@example.com")) != 0 {
		t.Errorf("a test delivery reached the provider")
	}
	if got := e.delivery(t, live.IdempotencyKey); got.Status != notify.StatusSent || got.Provider != "smtp" || len(e.sink.ByRecipient("citra@example.com")) != 1 {
		t.Errorf("the live delivery of the task of many: %s at %q, %d at the sink", got.Status, got.Provider, len(e.sink.ByRecipient("citra@example.com")))
	}
	if n := e.counter(t, "sekali_deliveries_total", "outcome", "sent", "mode", "test"); n != 2 {
		t.Errorf(`sekali_deliveries_total{outcome="sent",mode="test"} = %v, want 2`, n)
	}
	if n := e.counter(t, "sekali_deliveries_total", "outcome", "sent", "mode", "live"); n != 1 {
		t.Errorf(`sekali_deliveries_total{outcome="sent",mode="live"} = %v, want 1`, n)
	}
}
