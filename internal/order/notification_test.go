package order

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
)

// builtin loads the built-in templates, as the API does.
func builtin(t testing.TB) *mailtemplate.Templates {
	t.Helper()
	tmpl, err := mailtemplate.LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// shopTemplates loads the built-in templates and a shop's own,
// payment-reminder (deploy/templates, as the compose stack mounts it):
// the generic trigger's, which sends none of the built-in ones.
func shopTemplates(t testing.TB) *mailtemplate.Templates {
	t.Helper()
	tmpl, err := mailtemplate.Load(mailtemplate.Config{Dir: "../../deploy/templates", DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// templateReminder is the shop's own template of the tests' triggers.
const templateReminder = "payment-reminder"

// reminderJSON is payment-reminder's data as a shop's backend might send
// it: spaced out, its keys in no particular order.
const reminderJSON = `{
	"payment_url": "https://shop.example/pay/1", "currency": "IDR",
	"order_id": "0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87", "customer_name": "Ana Maria",
	"amount_due": 21500050, "due_at": "2026-12-03T17:00:00Z"
}`

// shippedJSON is order-shipped's data, which only Ship may send.
const shippedJSON = `{
	"tracking_number": "JNE-0042-7781", "carrier": "JNE",
	"order_id": "0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87", "customer_name": "Ana Maria",
	"items": [{"quantity": 2, "sku": "TEA-01", "name": "Teh melati 250 g"}],
	"shipped_at": "2026-12-01T03:00:00Z"
}`

// The trigger's checks (validateTrigger), without a database: when to
// send (RFC 3339 with its offset, up to the horizon; a time past, kept as
// asked, sends at once), the template (none that an endpoint of its own
// sends) and its schema (each failing field under /data), the event id
// that goes into the key, the recipient; every problem at once; and what
// passes comes back canonical.
func TestTriggerValidation(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 9, 15, 0, 0, time.UTC)
	tmpl := shopTemplates(t)
	valid := func(f func(tr *Trigger)) Trigger {
		tr := Trigger{Template: templateReminder, Data: json.RawMessage(reminderJSON), EventID: "reminder-2"}
		if f != nil {
			f(&tr)
		}
		return tr
	}
	tests := []struct {
		name    string
		horizon time.Duration // SendAtHorizon; 0 for the default
		in      Trigger
		sendAt  time.Time // when accepted: zero for none
		want    []string  // the fields refused; nil when accepted
	}{
		{"at once", 0, valid(nil), time.Time{}, nil},
		{"later, in the shop's time zone", 0, valid(func(tr *Trigger) { tr.SendAt = "2026-12-02T09:00:00+07:00" }),
			time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC), nil},
		{"at the default horizon exactly", 0, valid(func(tr *Trigger) { tr.SendAt = "2026-12-30T09:15:00Z" }),
			now.Add(DefaultSendAtHorizon), nil},
		{"a second past the default horizon", 0, valid(func(tr *Trigger) { tr.SendAt = "2026-12-30T09:15:01Z" }), time.Time{}, []string{"/send_at"}},
		{"past a horizon of two days", 48 * time.Hour, valid(func(tr *Trigger) { tr.SendAt = "2026-12-02T09:15:00.000001Z" }), time.Time{}, []string{"/send_at"}},
		{"within a horizon of two days", 48 * time.Hour, valid(func(tr *Trigger) { tr.SendAt = "2026-12-02T09:15:00Z" }), now.Add(48 * time.Hour), nil},
		{"a time past", 0, valid(func(tr *Trigger) { tr.SendAt = "2026-11-29T09:15:00Z" }), now.Add(-24 * time.Hour), nil},
		{"now", 0, valid(func(tr *Trigger) { tr.SendAt = "2026-11-30T16:15:00+07:00" }), now, nil},
		{"to the microsecond", 0, valid(func(tr *Trigger) { tr.SendAt = "2026-12-02T09:00:00.123456789+07:00" }),
			time.Date(2026, 12, 2, 2, 0, 0, 123456000, time.UTC), nil},
		{"a time without its offset", 0, valid(func(tr *Trigger) { tr.SendAt = "2026-12-02T09:00:00" }), time.Time{}, []string{"/send_at"}},
		{"a date alone", 0, valid(func(tr *Trigger) { tr.SendAt = "2026-12-02" }), time.Time{}, []string{"/send_at"}},
		{"no template", 0, valid(func(tr *Trigger) { tr.Template = "" }), time.Time{}, []string{"/template"}},
		{"an unknown template, its data unchecked", 0, valid(func(tr *Trigger) { tr.Template, tr.Data = "order-cancelled", json.RawMessage(`{}`) }),
			time.Time{}, []string{"/template"}},
		{"order-shipped, which a shipment sends", 0, valid(func(tr *Trigger) { tr.Template, tr.Data = TemplateShipped, json.RawMessage(shippedJSON) }),
			time.Time{}, []string{"/template"}},
		{"order-confirmation, which the checkout sends", 0, valid(func(tr *Trigger) { tr.Template, tr.Data = TemplateConfirmation, json.RawMessage(`{}`) }),
			time.Time{}, []string{"/template"}},
		{"no data", 0, valid(func(tr *Trigger) { tr.Data = json.RawMessage(" \n") }), time.Time{}, []string{"/data"}},
		{"data the schema refuses, at its fields", 0, valid(func(tr *Trigger) {
			tr.Data = json.RawMessage(strings.Replace(strings.Replace(reminderJSON, `"IDR"`, `"idr"`, 1), `"amount_due": 21500050`, `"amount_due": 0`, 1))
		}), time.Time{}, []string{"/data/amount_due", "/data/currency"}},
		{"an event id of 100 characters", 0, valid(func(tr *Trigger) { tr.EventID = strings.Repeat("a.b_c-", 16) + "1234" }), time.Time{}, nil},
		{"an event id of 101 characters", 0, valid(func(tr *Trigger) { tr.EventID = strings.Repeat("a", 101) }), time.Time{}, []string{"/event_id"}},
		{"an event id with the key's separator", 0, valid(func(tr *Trigger) { tr.EventID = "reminder:2" }), time.Time{}, []string{"/event_id"}},
		{"an event id with a space", 0, valid(func(tr *Trigger) { tr.EventID = "reminder 2" }), time.Time{}, []string{"/event_id"}},
		{"a recipient with a display name", 0, valid(func(tr *Trigger) { tr.Recipient = "Budi <budi@example.com>" }), time.Time{}, []string{"/recipient"}},
		{"everything at once", 0, Trigger{Template: "nope", SendAt: "soon", EventID: "a/b", Recipient: "budi"}, time.Time{},
			[]string{"/send_at", "/template", "/event_id", "/recipient"}},
	}
	for _, tt := range tests {
		s := &Service{templates: tmpl, SendAtHorizon: tt.horizon}
		tr := tt.in
		sendAt, err := s.validateTrigger(&tr, now)
		switch {
		case tt.want == nil && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.want == nil && !sendAt.Equal(tt.sendAt):
			t.Errorf("%s: send at %v, want %v", tt.name, sendAt, tt.sendAt)
		case tt.want != nil:
			if got := pointers(t, err); !slices.Equal(got, tt.want) || !sendAt.IsZero() {
				t.Errorf("%s: %v (send at %v), want %v\n(%v)", tt.name, got, sendAt, tt.want, err)
			}
		}
	}

	// A service without templates (NewService with nil) knows none.
	tr := valid(nil)
	if _, err := (&Service{}).validateTrigger(&tr, now); !slices.Equal(pointers(t, err), []string{"/template"}) {
		t.Errorf("without templates: %v", err)
	}
}

// A trigger re-serialized as a client's JSON library may on a retry
// (its data's keys in another order, other spacing, escapes, the
// recipient's case, send_at in another offset) validates to the same
// canonical trigger, which is what its Idempotency-Key's fingerprint is
// made of: its data compact with its keys sorted, send_at in UTC.
func TestTriggerCanonicalForm(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 9, 15, 0, 0, time.UTC)
	s := &Service{templates: shopTemplates(t)}
	spellings := []Trigger{
		{Template: templateReminder, Data: json.RawMessage(reminderJSON), EventID: "reminder-2",
			Recipient: "budi.santoso@example.com", SendAt: "2026-12-02T02:00:00Z"},
		{Template: templateReminder, EventID: "reminder-2", Recipient: "  Budi.Santoso@Example.COM ", SendAt: "2026-12-02T09:00:00+07:00",
			Data: json.RawMessage(`{"customer_name":"Ana Maria","amount_due":21500050,"due_at":"2026-12-03T17:00:00Z",` +
				`"order_id":"0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87","currency":"IDR","payment_url":"https://shop.example/pay/1"}`)},
		{Template: templateReminder, EventID: "reminder-2", Recipient: "BUDI.SANTOSO@EXAMPLE.COM", SendAt: "2026-12-01T21:00:00.000-05:00",
			Data: json.RawMessage("{\n\t\"order_id\" : \"0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87\",\r\n\"customer_name\":\"Ana \\u004daria\",\"currency\":\"IDR\"," +
				`"payment_url":"https:\/\/shop.example\/pay\/1","due_at":"2026-12-03T17:00:00Z","amount_due":21500050}`)},
	}
	want := Trigger{Template: templateReminder, EventID: "reminder-2", Recipient: "budi.santoso@example.com", SendAt: "2026-12-02T02:00:00Z",
		Data: json.RawMessage(`{"amount_due":21500050,"currency":"IDR","customer_name":"Ana Maria","due_at":"2026-12-03T17:00:00Z",` +
			`"order_id":"0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87","payment_url":"https://shop.example/pay/1"}`)}
	for i, tr := range spellings {
		if _, err := s.validateTrigger(&tr, now); err != nil {
			t.Fatalf("spelling %d: %v", i, err)
		}
		if !reflect.DeepEqual(tr, want) {
			t.Errorf("spelling %d validates to\n%s\nwant\n%s", i, show(tr), show(want))
		}
	}
}

// show writes a trigger for a failure message.
func show(tr Trigger) string {
	return fmt.Sprintf("template %s, event %s, recipient %s, send_at %s, data %s", tr.Template, tr.EventID, tr.Recipient, tr.SendAt, tr.Data)
}

// What of a trigger differs from the notification its key already names
// (differences), without a database: its data as a JSON value (members
// in any order, numbers by value, as jsonb keeps them), and when it is
// sent; the same trigger again differs in nothing, also once its send_at
// has passed.
func TestTriggerDifferences(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 30, 9, 15, 0, 0, time.UTC)
	later := created.Add(12 * time.Hour)
	stored := `{"amount_due": 21500050, "currency": "IDR", "items": [{"n": 1.50}, {"n": 2}]}` // as jsonb reads back
	atOnce := notify.Delivery{Data: json.RawMessage(stored), CreatedAt: created}
	scheduled := notify.Delivery{Data: json.RawMessage(stored), CreatedAt: created, NotBefore: &later}
	for _, tt := range []struct {
		name     string
		existing notify.Delivery
		data     string
		sendAt   time.Time
		want     []string
	}{
		{"the same, at once", atOnce, `{"amount_due":21500050,"currency":"IDR","items":[{"n":1.50},{"n":2}]}`, time.Time{}, nil},
		{"members in another order", atOnce, `{"items":[{"n":1.5},{"n":2}],"currency":"IDR","amount_due":21500050}`, time.Time{}, nil},
		{"numbers spelt otherwise", atOnce, `{"amount_due":2.150005e7,"currency":"IDR","items":[{"n":15E-1},{"n":2.000}]}`, time.Time{}, nil},
		{"another amount", atOnce, `{"amount_due":21500051,"currency":"IDR","items":[{"n":1.5},{"n":2}]}`, time.Time{}, []string{"data"}},
		{"a number as a string", atOnce, `{"amount_due":"21500050","currency":"IDR","items":[{"n":1.5},{"n":2}]}`, time.Time{}, []string{"data"}},
		{"a member more", atOnce, `{"amount_due":21500050,"currency":"IDR","items":[{"n":1.5},{"n":2}],"x":null}`, time.Time{}, []string{"data"}},
		{"the items in another order", atOnce, `{"amount_due":21500050,"currency":"IDR","items":[{"n":2},{"n":1.5}]}`, time.Time{}, []string{"data"}},
		{"a time past, as the first was sent at once", atOnce, stored, created.Add(-time.Hour), nil},
		{"later, where the first was at once", atOnce, stored, later, []string{"send_at"}},
		{"at the same time later", scheduled, stored, later, nil},
		{"at another time", scheduled, stored, later.Add(time.Microsecond), []string{"send_at"}},
		{"at once, where the first was later", scheduled, stored, time.Time{}, []string{"send_at"}},
		{"both", scheduled, `{}`, time.Time{}, []string{"data", "send_at"}},
	} {
		if got := differences(tt.existing, json.RawMessage(tt.data), tt.sendAt); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A JSON number by value (decimalOf), read without expanding its
// exponent, so that a hostile 1e999999999 costs nothing.
func TestDecimalOf(t *testing.T) {
	t.Parallel()
	same := [][]string{
		{"0", "-0", "0.000", "0e5", "-0.0E-3"},
		{"1", "1.0", "1.000", "10e-1", "0.1e1", "100E-2"},
		{"-21500050", "-2.150005e7", "-215000.50e2", "-0021500050"},
		{"0.015", "1.5e-2", "15E-3", "0.0150"},
		{"1e999999999", "10e999999998"},
	}
	for _, group := range same {
		first, ok := decimalOf(group[0])
		if !ok {
			t.Fatalf("%s: not read", group[0])
		}
		for _, n := range group[1:] {
			if d, ok := decimalOf(n); !ok || d != first {
				t.Errorf("%s = %+v, %v; want %+v as %s", n, d, ok, first, group[0])
			}
		}
	}
	for _, pair := range [][2]string{{"1", "-1"}, {"1", "10"}, {"0.1", "0.01"}, {"1e999999999", "1e999999998"}, {"12", "21"}} {
		a, _ := decimalOf(pair[0])
		b, _ := decimalOf(pair[1])
		if a == b {
			t.Errorf("%s and %s read as the same %+v", pair[0], pair[1], a)
		}
	}
	if _, ok := decimalOf("1e99999999999999999999"); ok {
		t.Error("an exponent past int64 was read")
	}
	if _, ok := decimalOf("1e9223372036854775807"); ok {
		t.Error("a point past int64 was read")
	}
}
