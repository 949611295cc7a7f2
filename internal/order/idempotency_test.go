package order

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
)

// What an earlier use of an Idempotency-Key means (priorUse), the one
// rule of the checkout's statement and of the trigger's look-up: while
// its record lives, the same request replays and another is refused; at
// its expiry, to the microsecond, it is forgotten, whatever the request.
func TestPriorUseOfAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	expires := time.Date(2026, 12, 1, 9, 15, 0, 0, time.UTC)
	same, other := []byte("fingerprint of the checkout"), []byte("fingerprint of another")
	for _, tt := range []struct {
		name       string
		now        time.Time
		hash       []byte
		wantReplay bool
		wantErr    error
	}{
		{"the same request, live", expires.Add(-time.Microsecond), same, true, nil},
		{"another request, live", expires.Add(-time.Microsecond), other, false, ErrKeyReused},
		{"the same request, at its expiry", expires, same, false, nil},
		{"another request, at its expiry", expires, other, false, nil},
		{"another request, long after", expires.Add(48 * time.Hour), other, false, nil},
		{"a request without a fingerprint, live", expires.Add(-time.Hour), nil, false, ErrKeyReused},
	} {
		replay, err := priorUse(expires, same, tt.hash, tt.now)
		if replay != tt.wantReplay || !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
			t.Errorf("%s: replay %v, %v; want %v, %v", tt.name, replay, err, tt.wantReplay, tt.wantErr)
		}
	}
}

// The scope an Idempotency-Key is recorded (and locked) under: the
// operation, and the API key for a caller with one. The records of keys
// live in idempotency_keys under these names across a deploy, so they are
// spelt out: an anonymous caller's scope is the operation alone, as every
// key's was before keys had owners, so that a storefront's retry across
// that upgrade still replays.
func TestIdempotencyKeyScopes(t *testing.T) {
	t.Parallel()
	key := uuid.MustParse("0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87")
	for _, tt := range []struct {
		caller    Caller
		op, scope string
	}{
		{Caller{Client: "203.0.113.7"}, idempotencyScope, "POST /v1/orders"},
		{Caller{}, notifyScope, "POST /v1/orders/{id}/notifications"},
		{Caller{Key: key, Owner: uuid.New()}, idempotencyScope, "POST /v1/orders key:0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87"},
		{Caller{Key: key}, notifyScope, "POST /v1/orders/{id}/notifications key:0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87"},
	} {
		if got := tt.caller.scope(tt.op); got != tt.scope {
			t.Errorf("%+v.scope(%q) = %q, want %q", tt.caller, tt.op, got, tt.scope)
		}
	}
}

// The same checkout again under its Idempotency-Key, however it is
// spelt (the address's case, spaces, the language tag's case), and
// later, is the first answer byte for byte, its access token included,
// and records nothing.
func TestPlaceReplaysTheFirstAnswer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	caller := keyed()
	first, err := e.svc.Place(t.Context(), basket(), caller, "key-1")
	if err != nil || first.Replayed {
		t.Fatalf("first: replayed %v, %v", first.Replayed, err)
	}
	if !e.queued(t, first.Notifications[0].ID) {
		t.Error("the confirmation was not queued")
	}

	e.now = e.now.Add(30 * time.Minute)
	respelt := with(func(c *Checkout) {
		c.CustomerEmail, c.CustomerName, c.Locale = "  Ana.Maria@EXAMPLE.com ", " Ana Maria\t", "id-id"
		c.Items[0].SKU, c.Items[1].Name = " TEA-01", "Cangkir & tatakan  "
	})
	again, err := e.svc.Place(t.Context(), respelt, caller, "key-1")
	if err != nil || !again.Replayed {
		t.Fatalf("again: replayed %v, %v", again.Replayed, err)
	}
	if !bytes.Equal(again.JSON, first.JSON) {
		t.Errorf("the replay answered\n%s\nthe first\n%s", again.JSON, first.JSON)
	}
	if again.ID != first.ID || again.AccessToken != first.AccessToken || !again.CreatedAt.Equal(first.CreatedAt) ||
		len(again.Notifications) != 1 || again.Notifications[0] != first.Notifications[0] {
		t.Errorf("the replay's order %+v\nwant the first %+v", again.Order, first.Order)
	}
	for table, want := range map[string]int{"orders": 1, "order_items": 2, "notification_deliveries": 1, "idempotency_keys": 1} {
		if n := e.count(t, table); n != want {
			t.Errorf("%d %s, want %d", n, table, want)
		}
	}
}

// The key with another checkout is refused, writes nothing and leaves
// the key's record as it was: what makes it another is anything the
// order records, the language and the lines' order included.
func TestPlaceRefusesAKeyReusedForAnotherCheckout(t *testing.T) {
	t.Parallel()
	e := setup(t)
	caller := keyed()
	first, err := e.svc.Place(t.Context(), basket(), caller, "key-1")
	if err != nil {
		t.Fatal(err)
	}
	for name, other := range map[string]Checkout{
		"another quantity":  with(func(c *Checkout) { c.Items[0].Quantity = 3 }),
		"another price":     with(func(c *Checkout) { c.Items[1].UnitPrice = price(12500051) }),
		"another language":  with(func(c *Checkout) { c.Locale = "en" }),
		"no language":       with(func(c *Checkout) { c.Locale = "" }),
		"another recipient": with(func(c *Checkout) { c.CustomerEmail = "budi@example.com" }),
		"another name":      with(func(c *Checkout) { c.CustomerName = "Ana María" }),
		"the lines swapped": with(func(c *Checkout) { c.Items[0], c.Items[1] = c.Items[1], c.Items[0] }),
		"another currency":  with(func(c *Checkout) { c.Currency = "USD" }),
	} {
		p, err := e.svc.Place(t.Context(), other, caller, "key-1")
		if !errors.Is(err, ErrKeyReused) || p.ID != uuid.Nil {
			t.Errorf("%s: %v, order %s; want ErrKeyReused", name, err, p.ID)
		}
	}
	if n := e.count(t, "orders"); n != 1 {
		t.Errorf("%d orders, want the first alone", n)
	}
	if again, err := e.svc.Place(t.Context(), basket(), caller, "key-1"); err != nil || !again.Replayed || !bytes.Equal(again.JSON, first.JSON) {
		t.Errorf("the first checkout after the refusals: replayed %v, %v", again.Replayed, err)
	}
}

// Each API key's Idempotency-Keys are its own: the same key and checkout
// from another API key, or without one, is a checkout of its own, never
// the first one's answer with its access token; each replays its own.
// Callers without an API key (a storefront's browsers) share one space,
// whatever their address: what keeps one from replaying another's is
// the random UUID the public checkout asks of them (httpapi).
func TestPlaceIdempotencyKeysBelongToTheirCaller(t *testing.T) {
	t.Parallel()
	e := setup(t)
	callers := map[string]Caller{"one API key": keyed(), "another": keyed(), "no API key": {Client: "203.0.113.7"}}
	firsts := map[string]Placed{}
	tokens := map[string]bool{}
	for name, c := range callers {
		p, err := e.svc.Place(t.Context(), basket(), c, "shared-key")
		if err != nil || p.Replayed || tokens[p.AccessToken] {
			t.Fatalf("%s: replayed %v, %v", name, p.Replayed, err)
		}
		firsts[name], tokens[p.AccessToken] = p, true
	}
	for name, c := range callers {
		p, err := e.svc.Place(t.Context(), basket(), c, "shared-key")
		if err != nil || !p.Replayed || !bytes.Equal(p.JSON, firsts[name].JSON) {
			t.Errorf("%s again: order %s replayed %v, %v; want its own %s", name, p.ID, p.Replayed, err, firsts[name].ID)
		}
	}
	if n := e.count(t, "orders"); n != len(callers) {
		t.Errorf("%d orders, want one per caller", n)
	}
	stranger, err := e.svc.Place(t.Context(), basket(), Caller{Client: "198.51.100.9"}, "shared-key")
	if err != nil || !stranger.Replayed || stranger.ID != firsts["no API key"].ID {
		t.Errorf("another anonymous caller: order %s replayed %v, %v", stranger.ID, stranger.Replayed, err)
	}
}

// A key's record lives for the service's key TTL and no longer: a
// microsecond before, it replays and refuses; at its expiry the key
// starts afresh, with another checkout too, which is then the one the key
// replays.
func TestPlaceKeyExpires(t *testing.T) {
	t.Parallel()
	e := setup(t)
	caller := keyed()
	other := with(func(c *Checkout) { c.Items[0].Quantity = 3 })
	t0 := e.now
	first, err := e.svc.Place(t.Context(), basket(), caller, "key-1")
	if err != nil {
		t.Fatal(err)
	}

	e.now = t0.Add(keyTTL - time.Microsecond)
	if _, err := e.svc.Place(t.Context(), other, caller, "key-1"); !errors.Is(err, ErrKeyReused) {
		t.Errorf("another checkout just before the expiry: %v, want ErrKeyReused", err)
	}
	if p, err := e.svc.Place(t.Context(), basket(), caller, "key-1"); err != nil || !p.Replayed {
		t.Errorf("the same checkout just before the expiry: replayed %v, %v", p.Replayed, err)
	}

	e.now = t0.Add(keyTTL)
	second, err := e.svc.Place(t.Context(), other, caller, "key-1")
	if err != nil || second.Replayed || second.ID == first.ID {
		t.Fatalf("another checkout at the expiry: order %s replayed %v, %v; want a new order", second.ID, second.Replayed, err)
	}
	if !e.queued(t, second.Notifications[0].ID) {
		t.Error("the new order's confirmation was not queued")
	}

	e.now = e.now.Add(time.Microsecond)
	if p, err := e.svc.Place(t.Context(), other, caller, "key-1"); err != nil || !p.Replayed || !bytes.Equal(p.JSON, second.JSON) {
		t.Errorf("the second checkout again: replayed %v, %v; want the second answer", p.Replayed, err)
	}
	if _, err := e.svc.Place(t.Context(), basket(), caller, "key-1"); !errors.Is(err, ErrKeyReused) {
		t.Errorf("the first checkout after the key started afresh: %v, want ErrKeyReused", err)
	}
	if n := e.count(t, "orders"); n != 2 {
		t.Errorf("%d orders, want 2", n)
	}
	if n := e.count(t, "idempotency_keys"); n != 1 {
		t.Errorf("%d key records, want the expired one replaced", n)
	}
}

// reminder is payment-reminder's data about order id, for the trigger.
func reminder(id uuid.UUID) json.RawMessage {
	return json.RawMessage(`{"order_id":"` + id.String() + `","customer_name":"Ana Maria","currency":"IDR","amount_due":21500050,` +
		`"due_at":"2026-12-03T17:00:00Z","payment_url":"https://shop.example/pay/1"}`)
}

// The trigger (Notify) under an Idempotency-Key replays its first answer,
// created flag and all, and queues nothing; another trigger under the key
// is refused; another caller's same key is its own (and finds the
// notification by the notification's own key: not created, not a
// replay); at its expiry the key starts afresh; the checkout's keys and
// the trigger's are apart.
func TestNotifyReplaysTheFirstAnswer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a, b := keyed(), keyed()
	o := e.place(t, basket(), a)
	t0 := e.now
	parcel := func(event string) Trigger {
		return Trigger{Template: templateReminder, EventID: event, Data: reminder(o.ID)}
	}
	trigger := func(tr Trigger, c Caller, key string) (Notification, bool, bool, error) {
		return e.svc.Notify(t.Context(), o.ID, tr, c, key)
	}

	first, created, replayed, err := trigger(parcel("parcel-2"), a, "k")
	if err != nil || !created || replayed {
		t.Fatalf("first: created %v replayed %v, %v", created, replayed, err)
	}
	if !e.queued(t, first.ID) {
		t.Error("the notification was not queued")
	}
	e.now = t0.Add(time.Hour)
	if n, created, replayed, err := trigger(parcel("parcel-2"), a, "k"); err != nil || !replayed || !created || n != first {
		t.Errorf("again: %+v created %v replayed %v, %v; want the first answer, created, replayed", n, created, replayed, err)
	}
	if _, _, _, err := trigger(parcel("parcel-3"), a, "k"); !errors.Is(err, ErrKeyReused) {
		t.Errorf("another trigger under the key: %v, want ErrKeyReused", err)
	}
	if n := e.count(t, "notification_deliveries"); n != 2 {
		t.Errorf("%d deliveries, want the confirmation and one reminder", n)
	}

	// Another caller's same key: not a replay of a's, and its own answer
	// (the notification existed: not created) is what it replays.
	n, created, replayed, err := trigger(parcel("parcel-2"), b, "k")
	if err != nil || replayed || created || n.ID != first.ID {
		t.Errorf("another caller: %s created %v replayed %v, %v; want the notification found, not replayed", n.ID, created, replayed, err)
	}
	if again, created, replayed, err := trigger(parcel("parcel-2"), b, "k"); err != nil || !replayed || created || again != n {
		t.Errorf("another caller again: created %v replayed %v, %v; want its own first answer", created, replayed, err)
	}

	// The checkout's keys are another space.
	if p, err := e.svc.Place(t.Context(), basket(), a, "k"); err != nil || p.Replayed {
		t.Errorf("a checkout under a trigger's key: replayed %v, %v", p.Replayed, err)
	}

	e.now = t0.Add(keyTTL)
	third, created, replayed, err := trigger(parcel("parcel-3"), a, "k")
	if err != nil || !created || replayed || third.ID == first.ID {
		t.Errorf("another trigger at the expiry: %s created %v replayed %v, %v; want a new notification", third.ID, created, replayed, err)
	}
	if n := e.count(t, "notification_deliveries"); n != 4 {
		t.Errorf("%d deliveries, want two confirmations and two reminders", n)
	}
}

// A trigger whose key another request holds (its transaction has the
// key's lock) is told so, and records nothing; once that one ends, it
// goes through.
func TestNotifyWhileItsKeyIsInFlight(t *testing.T) {
	t.Parallel()
	e := setup(t)
	caller := keyed()
	o := e.place(t, basket(), caller)
	tx, err := e.db.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck // rolled back below
	locked, err := dbsqlc.New(tx).TryLockIdempotencyKey(t.Context(), dbsqlc.TryLockIdempotencyKeyParams{Scope: caller.scope(notifyScope), Key: "busy"})
	if err != nil || !locked {
		t.Fatalf("lock: %v %v", locked, err)
	}
	tr := Trigger{Template: templateReminder, Data: reminder(o.ID)}
	if _, _, _, err := e.svc.Notify(t.Context(), o.ID, tr, caller, "busy"); !errors.Is(err, ErrRequestInFlight) {
		t.Errorf("while in flight: %v, want ErrRequestInFlight", err)
	}
	if n := e.count(t, "notification_deliveries"); n != 1 {
		t.Errorf("%d deliveries, want the confirmation alone", n)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, created, _, err := e.svc.Notify(t.Context(), o.ID, tr, caller, "busy"); err != nil || !created {
		t.Errorf("after the other ended: created %v, %v", created, err)
	}
}

// The same trigger re-serialized on retry, as a client's JSON library
// may (its data's keys in another order, other spacing, the recipient's
// case, send_at in another offset), is the same request: its first answer
// is replayed, not refused as another (as for the checkout: "the same
// request after validation").
func TestNotifyReplaysTheSameTriggerHoweverItIsSpelt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	caller := keyed()
	o := e.place(t, basket(), caller)
	sendAt := e.now.Add(2 * time.Hour).Truncate(time.Second)
	first, created, _, err := e.svc.Notify(t.Context(), o.ID, Trigger{Template: templateReminder, EventID: "parcel-2", Data: reminder(o.ID),
		Recipient: "budi@example.com", SendAt: sendAt.Format(time.RFC3339Nano)}, caller, "k")
	if err != nil || !created {
		t.Fatalf("first: created %v, %v", created, err)
	}
	respelt := json.RawMessage(`{
		"payment_url": "https://shop.example/pay/1", "due_at": "2026-12-03T17:00:00Z",
		"amount_due": 21500050, "currency": "IDR", "customer_name": "Ana Maria", "order_id": "` + o.ID.String() + `"
	}`)
	n, _, replayed, err := e.svc.Notify(t.Context(), o.ID, Trigger{Template: templateReminder, EventID: "parcel-2", Data: respelt,
		Recipient: " Budi@Example.COM", SendAt: sendAt.In(time.FixedZone("WIB", 7*3600)).Format(time.RFC3339)}, caller, "k")
	if have, want := asJSON(t, n), asJSON(t, first); err != nil || !replayed || have != want {
		t.Errorf("the same trigger respelt: %s replayed %v, %v; want the first answer %s replayed", have, replayed, err, want)
	}
	if first.SendAt == nil || !first.SendAt.Equal(sendAt) {
		t.Errorf("send_at %v, want %v", first.SendAt, sendAt)
	}
}

// asJSON is v as the API writes it.
func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
