package order

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/notify"
)

// Each shipment is its own event: a second parcel is another shipment
// and another e-mail, keyed by the shipment, with its own carrier and
// tracking number; the same shipment again, from any key, is the same
// e-mail, also when eight ask at once. Every shipment is recorded, with
// the key that recorded it and its owner, and the order shows them.
func TestEachShipmentIsItsOwnEmail(t *testing.T) {
	t.Parallel()
	e := setup(t)
	shop, warehouse := keyed(), keyed()
	o := e.place(t, basket(), shop)

	first := Shipment{Carrier: "JNE", TrackingNumber: "JNE-0042-7781"}
	var wg sync.WaitGroup
	results := make([]Notification, 8)
	created := make([]bool, 8)
	errs := make([]error, 8)
	for i := range results {
		wg.Go(func() { results[i], created[i], errs[i] = e.svc.Ship(t.Context(), o.ID, first, warehouse) })
	}
	wg.Wait()
	made := 0
	for i := range results {
		if errs[i] != nil || results[i].ID != results[0].ID {
			t.Fatalf("shipment %d at once: %+v, %v; want the one e-mail", i, results[i], errs[i])
		}
		if created[i] {
			made++
		}
	}
	if made != 1 {
		t.Errorf("%d of 8 at once created the e-mail, want 1", made)
	}
	if again, created, err := e.svc.Ship(t.Context(), o.ID, Shipment{Carrier: " JNE ", TrackingNumber: "JNE-0042-7781"}, shop); err != nil || created || again.ID != results[0].ID {
		t.Errorf("the same shipment from the shop's key: %+v created %v, %v; want the first e-mail", again, created, err)
	}

	second, created2, err := e.svc.Ship(t.Context(), o.ID, Shipment{Carrier: "SiCepat", TrackingNumber: "SC-2"}, shop)
	if err != nil || !created2 || second.ID == results[0].ID || !e.queued(t, second.ID) {
		t.Fatalf("a second parcel: %+v created %v, %v; want an e-mail of its own, queued", second, created2, err)
	}

	got, err := e.svc.Get(t.Context(), o.ID, shop)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Shipments) != 2 {
		t.Fatalf("the order's shipments: %+v, want 2", got.Shipments)
	}
	for i, want := range []struct {
		sh     Shipment
		n      Notification
		caller Caller
	}{{first, results[0], warehouse}, {Shipment{Carrier: "SiCepat", TrackingNumber: "SC-2"}, second, shop}} {
		s := got.Shipments[i]
		if s.Carrier != want.sh.Carrier || s.TrackingNumber != want.sh.TrackingNumber || s.NotificationID == nil || *s.NotificationID != want.n.ID {
			t.Errorf("shipment %d: %+v, want %+v with e-mail %s", i, s, want.sh, want.n.ID)
		}
		if key := notify.EventKey(TemplateShipped, o.ID, s.ID.String(), o.CustomerEmail); want.n.IdempotencyKey != key {
			t.Errorf("shipment %d's e-mail has key %s, want %s", i, want.n.IdempotencyKey, key)
		}
		d, err := notify.Get(t.Context(), e.db.Pool, want.n.ID)
		if err != nil {
			t.Fatal(err)
		}
		var shipped shippedData
		if err := json.Unmarshal(d.Data, &shipped); err != nil || shipped.Carrier != want.sh.Carrier || shipped.TrackingNumber != want.sh.TrackingNumber {
			t.Errorf("shipment %d's e-mail says %+v, %v; want %+v", i, shipped, err, want.sh)
		}
		var keyID, owner uuid.UUID
		if err := e.db.Pool.QueryRow(t.Context(), "SELECT key_id, owner_id FROM shipments WHERE id = $1", s.ID).Scan(&keyID, &owner); err != nil ||
			keyID != want.caller.Key || owner != want.caller.Owner {
			t.Errorf("shipment %d recorded by %s of %s, %v; want %s of %s", i, keyID, owner, err, want.caller.Key, want.caller.Owner)
		}
	}
	if n := e.count(t, "notification_deliveries"); n != 3 {
		t.Errorf("%d deliveries, want the confirmation and two shipped", n)
	}
}
