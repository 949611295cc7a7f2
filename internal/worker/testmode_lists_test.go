package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testmail"
)

// Test mode and live each have a suppression list and an unsubscribe
// list of their own, and a delivery meets only its own mode's (issue
// 40: a test key could ask whether a real address bounced or
// complained, and read the operator's note).
//
// A test key's confirmation to an address on the live list, by an
// operator and with a note, is sent by the test provider, and no word of
// the entry reaches it; nor does a test subscription mail to an address
// that left the live subscription mail meet that. What the test
// provider reports about a test delivery lists its recipient for test
// mode alone, whatever the address (the list's mode is the delivery's,
// not the domain's): the next test delivery to it is suppressed with
// test mode's reason, while a live one to it goes out. The transitions
// the worker runs on the claim's verdict (SuppressPending,
// SuppressUnsubscribed) hold the same line on their own.
func TestTestAndLiveHaveSuppressionListsOfTheirOwn(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	ctx := context.Background()
	w := e.worker(t, workerOpts{})
	news := e.worker(t, workerOpts{templates: newsletter(t)})
	testKey := order.Caller{Key: uuid.New(), Owner: uuid.New(), Test: true}
	place := func(caller order.Caller, email string) notify.Delivery {
		t.Helper()
		price := int64(150000)
		o, err := e.orders.Place(ctx, order.Checkout{
			CustomerEmail: email, CustomerName: "Budi", Currency: "IDR",
			Items: []order.CheckoutItem{{SKU: "KOPI-1", Name: "Kopi Toraja", Quantity: 2, UnitPrice: &price}},
		}, caller, "")
		if err != nil {
			t.Fatal(err)
		}
		return e.delivery(t, o.Notifications[0].IdempotencyKey)
	}
	newsletterOf := func(d notify.Delivery) notify.Delivery { // of d's order, to d's recipient, in d's mode
		t.Helper()
		n, created, err := notify.Record(ctx, e.db.Pool, notify.Intent{OrderID: d.OrderID, Template: "newsletter", Recipient: d.Recipient,
			Data: map[string]string{"customer_name": "Budi"}, EventID: uuid.NewString(), Owner: *d.Owner, Test: d.Test}, time.Now())
		if err != nil || !created {
			t.Fatalf("record a newsletter: %v, %v", created, err)
		}
		return n
	}
	// reports makes the test provider report kind about the test
	// delivery d, as the reconciler does for a magic address.
	reports := func(d notify.Delivery, kind mail.FeedbackKind) {
		t.Helper()
		d = e.f.Get(d.ID)
		if _, err := notify.RecordFeedback(ctx, e.db.Pool, mail.Feedback{Provider: mail.TestProvider, EventID: testmail.EventPrefix + d.ID.String(),
			Kind: kind, ProviderMessageID: d.ProviderMessageID, MessageID: d.MessageID, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// wentOut checks that d, processed by worker, is sent, and that
	// nothing of a suppression reached it.
	wentOut := func(what string, worker testWorker, d notify.Delivery) {
		t.Helper()
		e.deliver(t, worker, d)
		got := e.f.Get(d.ID)
		_, events, err := e.ops.Get(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			if ev.Event == "suppressed" || strings.Contains(string(ev.Detail), "complaint from customer") {
				t.Errorf("%s: the history says %s %s", what, ev.Event, ev.Detail)
			}
		}
		if got.Status != notify.StatusSent || got.LastError != "" {
			t.Errorf("%s: %s (%q), want sent", what, got.Status, got.LastError)
		}
	}

	if _, _, err := e.ops.Suppress(ctx, "ana@example.com", "complaint from customer", "ops@shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ops.Unsubscribe(ctx, "ana@example.com", "subscription"); err != nil {
		t.Fatal(err)
	}
	toAna := place(testKey, "ana@example.com")
	if err := notify.SuppressPending(ctx, e.db.Pool, toAna.ID, "test"); !errors.Is(err, notify.ErrRaced) {
		t.Errorf("SuppressPending of a test delivery by the live list: %v, want ErrRaced", err)
	}
	wentOut("a test confirmation to an address on the live list", w, toAna)
	newsToAna := newsletterOf(toAna)
	if err := notify.SuppressUnsubscribed(ctx, e.db.Pool, newsToAna.ID, "test"); !errors.Is(err, notify.ErrRaced) {
		t.Errorf("SuppressUnsubscribed of a test delivery by a live unsubscribe: %v, want ErrRaced", err)
	}
	wentOut("a test newsletter to an address that left the live subscription mail", news, newsToAna)
	if e.sink.Count() != 0 {
		t.Fatalf("%d e-mails reached the provider from test deliveries", e.sink.Count())
	}

	// The test provider's reports: test mode's lists alone.
	toBudi := place(testKey, "budi@example.com")
	e.deliver(t, w, toBudi)
	reports(toBudi, mail.FeedbackBounced)
	newsToCitra := newsletterOf(place(testKey, "citra@example.com"))
	e.deliver(t, news, newsToCitra)
	reports(newsToCitra, mail.FeedbackUnsubscribed)

	wentOut("a live confirmation to an address test mode suppressed", w, e.checkout(t, "budi@example.com"))
	wentOut("a live newsletter to an address that left test mode's subscription mail", news, newsletterOf(e.checkout(t, "citra@example.com")))
	if e.sink.Count() != 2 {
		t.Errorf("the provider got %d e-mails, want the two live ones", e.sink.Count())
	}

	again := place(testKey, "budi@example.com")
	e.deliver(t, w, again)
	if got := e.f.Get(again.ID); got.Status != notify.StatusSuppressed || !strings.Contains(got.LastError, "test reported a bounce") {
		t.Errorf("the next test confirmation to the address test mode suppressed: %s (%q), want suppressed by test mode's bounce", got.Status, got.LastError)
	}
	newsAgain := newsletterOf(place(testKey, "citra@example.com"))
	e.deliver(t, news, newsAgain)
	if got := e.f.Get(newsAgain.ID); got.Status != notify.StatusSuppressed || !strings.Contains(got.LastError, "unsubscribed") {
		t.Errorf("the next test newsletter to the address that left test mode's subscription mail: %s (%q), want suppressed", got.Status, got.LastError)
	}

	list, err := e.ops.Suppressions(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]bool{}
	for _, s := range list {
		modes[s.Recipient] = s.Test
	}
	if len(list) != 2 || modes["ana@example.com"] || !modes["budi@example.com"] {
		t.Errorf("the suppressions %+v; want ana's live and budi's test mode's", list)
	}
}

// The reconciler's settlement of a delivery that may have been sent and
// is held back (notify.HeldBackUnsettled, on the claim's own judgement,
// delivery_held_back) meets only its mode's list too: a live entry holds
// back the live delivery in doubt, not a test one to the same address.
func TestTheSettlementOfADeliveryInDoubtMeetsItsModesListOnly(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	ctx := context.Background()
	price := int64(150000)
	inDoubt := map[bool]notify.Delivery{}
	for _, test := range []bool{false, true} {
		o, err := e.orders.Place(ctx, order.Checkout{
			CustomerEmail: "ana@example.com", CustomerName: "Ana", Currency: "IDR",
			Items: []order.CheckoutItem{{SKU: "KOPI-1", Name: "Kopi Toraja", Quantity: 1, UnitPrice: &price}},
		}, order.Caller{Key: uuid.New(), Owner: uuid.New(), Test: test}, "")
		if err != nil {
			t.Fatal(err)
		}
		provider := "smtp"
		if test {
			provider = mail.TestProvider
		}
		inDoubt[test] = e.f.MaybeAccepted(e.delivery(t, o.Notifications[0].IdempotencyKey), provider)
	}
	if _, _, err := e.ops.Suppress(ctx, "ana@example.com", "complaint from customer", "ops@shop"); err != nil {
		t.Fatal(err)
	}
	held, err := notify.HeldBackUnsettled(ctx, e.db.Pool, time.Hour, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0].Delivery.ID != inDoubt[false].ID || held[0].Reason != notify.VerdictSuppressed {
		t.Errorf("held back in doubt: %+v; want the live delivery alone, suppressed", held)
	}
}
