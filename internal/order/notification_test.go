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

// shippedJSON is order-shipped's data as a shop's backend might send it:
// spaced out, its keys in no particular order.
const shippedJSON = `{
	"tracking_number": "JNE-0042-7781", "carrier": "JNE",
	"order_id": "0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87", "customer_name": "Ana Maria",
	"items": [{"quantity": 2, "sku": "TEA-01", "name": "Teh melati 250 g"}],
	"shipped_at": "2026-12-01T03:00:00Z"
}`

// The trigger's checks (validateTrigger), without a database: when to
// send (RFC 3339 with its offset, up to the horizon, a time past meaning
// now), the template and its schema (each failing field under /data),
// the event id that goes into the key, the recipient; every problem at
// once; and what passes comes back canonical.
func TestTriggerValidation(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 9, 15, 0, 0, time.UTC)
	tmpl := builtin(t)
	valid := func(f func(tr *Trigger)) Trigger {
		tr := Trigger{Template: TemplateShipped, Data: json.RawMessage(shippedJSON), EventID: "parcel-2"}
		if f != nil {
			f(&tr)
		}
		return tr
	}
	tests := []struct {
		name    string
		horizon time.Duration // SendAtHorizon; 0 for the default
		in      Trigger
		sendAt  time.Time // when accepted: zero for now
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
		{"a time past is now", 0, valid(func(tr *Trigger) { tr.SendAt = "2026-11-29T09:15:00Z" }), time.Time{}, nil},
		{"now is now", 0, valid(func(tr *Trigger) { tr.SendAt = "2026-11-30T16:15:00+07:00" }), time.Time{}, nil},
		{"a time without its offset", 0, valid(func(tr *Trigger) { tr.SendAt = "2026-12-02T09:00:00" }), time.Time{}, []string{"/send_at"}},
		{"a date alone", 0, valid(func(tr *Trigger) { tr.SendAt = "2026-12-02" }), time.Time{}, []string{"/send_at"}},
		{"no template", 0, valid(func(tr *Trigger) { tr.Template = "" }), time.Time{}, []string{"/template"}},
		{"an unknown template, its data unchecked", 0, valid(func(tr *Trigger) { tr.Template, tr.Data = "order-cancelled", json.RawMessage(`{}`) }),
			time.Time{}, []string{"/template"}},
		{"no data", 0, valid(func(tr *Trigger) { tr.Data = json.RawMessage(" \n") }), time.Time{}, []string{"/data"}},
		{"data the schema refuses, at its fields", 0, valid(func(tr *Trigger) {
			tr.Data = json.RawMessage(strings.Replace(strings.Replace(shippedJSON, `"JNE"`, `""`, 1), `"quantity": 2`, `"quantity": 0`, 1))
		}), time.Time{}, []string{"/data/carrier", "/data/items/0/quantity"}},
		{"an event id of 100 characters", 0, valid(func(tr *Trigger) { tr.EventID = strings.Repeat("a.b_c-", 16) + "1234" }), time.Time{}, nil},
		{"an event id of 101 characters", 0, valid(func(tr *Trigger) { tr.EventID = strings.Repeat("a", 101) }), time.Time{}, []string{"/event_id"}},
		{"an event id with the key's separator", 0, valid(func(tr *Trigger) { tr.EventID = "parcel:2" }), time.Time{}, []string{"/event_id"}},
		{"an event id with a space", 0, valid(func(tr *Trigger) { tr.EventID = "parcel 2" }), time.Time{}, []string{"/event_id"}},
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
	s := &Service{templates: builtin(t)}
	spellings := []Trigger{
		{Template: TemplateShipped, Data: json.RawMessage(shippedJSON), EventID: "parcel-2",
			Recipient: "budi.santoso@example.com", SendAt: "2026-12-02T02:00:00Z"},
		{Template: TemplateShipped, EventID: "parcel-2", Recipient: "  Budi.Santoso@Example.COM ", SendAt: "2026-12-02T09:00:00+07:00",
			Data: json.RawMessage(`{"customer_name":"Ana Maria","items":[{"name":"Teh melati 250 g","quantity":2,"sku":"TEA-01"}],` +
				`"order_id":"0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87","carrier":"JNE","shipped_at":"2026-12-01T03:00:00Z","tracking_number":"JNE-0042-7781"}`)},
		{Template: TemplateShipped, EventID: "parcel-2", Recipient: "BUDI.SANTOSO@EXAMPLE.COM", SendAt: "2026-12-01T21:00:00.000-05:00",
			Data: json.RawMessage("{\n\t\"order_id\" : \"0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87\",\r\n\"customer_name\":\"Ana \\u004daria\",\"carrier\":\"JNE\"," +
				`"tracking_number":"JNE-0042-7781","shipped_at":"2026-12-01T03:00:00Z","items":[{"sku":"TEA-01","quantity":2,"name":"Teh melati 250 g"}]}`)},
	}
	want := Trigger{Template: TemplateShipped, EventID: "parcel-2", Recipient: "budi.santoso@example.com", SendAt: "2026-12-02T02:00:00Z",
		Data: json.RawMessage(`{"carrier":"JNE","customer_name":"Ana Maria","items":[{"name":"Teh melati 250 g","quantity":2,"sku":"TEA-01"}],` +
			`"order_id":"0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87","shipped_at":"2026-12-01T03:00:00Z","tracking_number":"JNE-0042-7781"}`)}
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
