package order

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/notify"
)

// The shop's order number is trimmed, one line of at most 64 characters,
// and optional; a blank one is refused rather than taken for none.
func TestCheckoutReference(t *testing.T) {
	t.Parallel()
	v, err := with(func(c *Checkout) { c.Reference = "\u00a0TA-2026/0042 " }).validate()
	if err != nil || v.Reference != "TA-2026/0042" {
		t.Errorf("a reference: %q, %v; want it trimmed", v.Reference, err)
	}
	for name, ref := range map[string]string{
		"blank":                          " \t",
		"on two lines":                   "TA-1\nTA-2",
		"one character too long":         strings.Repeat("号", MaxReferenceRunes+1),
		"a bidirectional control inside": "TA-\u202e2400",
	} {
		if got := pointers(t, refused(t, with(func(c *Checkout) { c.Reference = ref }))); !slices.Equal(got, []string{"/reference"}) {
			t.Errorf("%s: %v, want /reference", name, got)
		}
	}
	// Anonymous checkouts share one owner: a number from a browser would
	// be a stranger's to take.
	v, _ = with(func(c *Checkout) { c.Reference = "TA-1" }).validate()
	if got := pointers(t, (&PublicRules{}).checkPublic(v)); !slices.Equal(got, []string{"/reference"}) {
		t.Errorf("the public checkout with a reference: %v, want /reference", got)
	}
}

// An order number is its owner's once: a second checkout of the owner
// with it, whatever its content, is refused with the order that has it
// and writes nothing; another owner (another API key's line) may use
// it; the same checkout retried under its Idempotency-Key is replayed,
// and the number under a new key is refused like any second checkout.
// The order, its API answer and its e-mails' data carry the number.
func TestAnOrderNumberIsItsOwnersOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	shop, other := keyed(), keyed()
	numbered := with(func(c *Checkout) { c.Reference = "TA-2026-0042" })
	first, err := e.svc.Place(t.Context(), numbered, shop, "cart-1")
	if err != nil {
		t.Fatal(err)
	}
	if first.Reference != "TA-2026-0042" || !bytes.Contains(first.JSON, []byte(`"reference":"TA-2026-0042"`)) {
		t.Errorf("the checkout's answer: %s", first.JSON)
	}

	var taken *ReferenceTakenError
	for name, c := range map[string]Checkout{
		"the same checkout without a key": numbered,
		"another basket":                  with(func(c *Checkout) { c.Reference, c.Items[0].Quantity = "TA-2026-0042", 5 }),
		"another customer":                with(func(c *Checkout) { c.Reference, c.CustomerEmail = "TA-2026-0042", "budi@example.com" }),
	} {
		if _, err := e.svc.Place(t.Context(), c, shop, ""); !errors.As(err, &taken) || taken.Order != first.ID || taken.Reference != "TA-2026-0042" {
			t.Errorf("%s: %v, want the number taken by %s", name, err, first.ID)
		}
	}
	if _, err := e.svc.Place(t.Context(), with(func(c *Checkout) { c.Reference, c.Locale = "TA-2026-0042", "en" }), shop, "cart-2"); !errors.As(err, &taken) || taken.Order != first.ID {
		t.Errorf("the number under a new Idempotency-Key: %v, want it taken", err)
	}
	again, err := e.svc.Place(t.Context(), numbered, shop, "cart-1")
	if err != nil || !again.Replayed || !bytes.Equal(again.JSON, first.JSON) {
		t.Errorf("the same checkout under its Idempotency-Key: replayed %v, %v; want the first answer", again.Replayed, err)
	}
	if _, err := e.svc.Place(t.Context(), with(func(c *Checkout) { c.Reference = "TA-2026-0042"; c.Items[0].Quantity = 9 }), shop, "cart-1"); !errors.Is(err, ErrKeyReused) {
		t.Errorf("another checkout under the first's key: %v, want ErrKeyReused", err)
	}
	for table, want := range map[string]int{"orders": 1, "notification_deliveries": 1, "idempotency_keys": 1} {
		if n := e.count(t, table); n != want {
			t.Errorf("%d %s after the refusals, want %d", n, table, want)
		}
	}
	// A key made to replace the shop's (a rotation) is the same owner.
	rotated := Caller{Key: uuid.New(), Owner: shop.Owner}
	if _, err := e.svc.Place(t.Context(), numbered, rotated, ""); !errors.As(err, &taken) {
		t.Errorf("the shop's rotated key: %v, want the number taken", err)
	}
	theirs := e.place(t, numbered, other)
	if theirs.Reference != "TA-2026-0042" || theirs.ID == first.ID {
		t.Errorf("another owner's order with the number: %+v", theirs.Order)
	}

	o, err := e.svc.Get(t.Context(), first.ID, shop)
	if err != nil || o.Reference != "TA-2026-0042" {
		t.Errorf("Get: reference %q, %v", o.Reference, err)
	}
	if _, _, err := e.svc.Ship(t.Context(), first.ID, Shipment{Carrier: "JNE", TrackingNumber: "JNE-1"}, shop); err != nil {
		t.Fatal(err)
	}
	ds, err := notify.ListByOrder(t.Context(), e.db.Pool, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		var data struct{ Reference string }
		if err := json.Unmarshal(d.Data, &data); err != nil || data.Reference != "TA-2026-0042" {
			t.Errorf("%s's data %s: want the order number", d.Template, d.Data)
		}
	}
	// Without a number, the data has none, and the fingerprint of a
	// checkout is what it was before there were numbers.
	plain := e.place(t, basket(), shop)
	if plain.Reference != "" || bytes.Contains(plain.JSON, []byte("reference")) {
		t.Errorf("an order without a number: %s", plain.JSON)
	}
	v, _ := basket().validate()
	if fp, _ := json.Marshal(v); bytes.Contains(fp, []byte("Reference")) {
		t.Errorf("the fingerprint of a checkout without a number names one: %s", fp)
	}
}

// PostgreSQL keeps an owner's numbers apart whatever writes the order:
// a statement that is not the checkout's (on purpose, raw SQL) is
// refused a number the owner has, and one that is not trimmed.
func TestTheDatabaseKeepsAnOwnersNumbersApart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	shop := keyed()
	first := e.place(t, with(func(c *Checkout) { c.Reference = "TA-7" }), shop)
	insert := func(ref string) error {
		_, err := e.db.Pool.Exec(t.Context(), `INSERT INTO orders (id, customer_email, customer_name, currency, total_minor, created_at, access_token_hash, owner_id, reference)
			VALUES ($1, 'a@example.com', 'A', 'IDR', 1, now(), '\x00', $2, $3)`, uuid.Must(uuid.NewV7()), shop.Owner, ref)
		return err
	}
	if err := insert("TA-7"); !isUniqueViolation(err, "orders_owner_reference_key") {
		t.Errorf("a second order of the owner numbered as %s: %v", first.ID, err)
	}
	if err := insert(" TA-8"); err == nil {
		t.Error("a number with a leading space was taken")
	}
}
