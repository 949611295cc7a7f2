package queue

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
)

// A task's payload, both forms: what NewDeliveriesTask writes, ParseTask
// reads back in order; one delivery's task is the form every task had
// before (a worker of this version reads a queue an older API filled);
// a payload no worker could act on whole is refused whole.
func TestParseTask(t *testing.T) {
	ds := make([]notify.Delivery, 3)
	for i := range ds {
		ds[i] = notify.Delivery{ID: uuid.New(), IdempotencyKey: "order-confirmation:" + uuid.NewString() + ":a@example.com"}
	}
	one := NewDeliverTask(ds[0]).Payload()
	var old struct {
		DeliveryID string `json:"delivery_id"`
		KeyHash    string `json:"key_hash"`
	}
	if err := json.Unmarshal(one, &old); err != nil || old.DeliveryID != ds[0].ID.String() || old.KeyHash != mail.KeyHash(ds[0].IdempotencyKey) ||
		strings.Contains(string(one), "deliveries") {
		t.Errorf("one delivery's payload %s, want {delivery_id, key_hash} alone", one)
	}
	for _, n := range []int{1, 3} {
		task, err := ParseTask(NewDeliveriesTask(ds[:n]).Payload())
		ps := task.Deliveries
		if err != nil || len(ps) != n {
			t.Fatalf("%d deliveries: %v, %v", n, ps, err)
		}
		for i, p := range ps {
			if p.DeliveryID != ds[i].ID || p.KeyHash != mail.KeyHash(ds[i].IdempotencyKey) {
				t.Errorf("%d deliveries: member %d is %+v, want %s", n, i, p, ds[i].ID)
			}
		}
	}
	if many := string(NewDeliveriesTask(ds).Payload()); strings.Contains(many, `"delivery_id":"00000000`) || strings.Contains(many, `"key_hash":""`) {
		t.Errorf("a task of many carries an empty delivery of its own: %s", many)
	}

	hash := mail.KeyHash("k")
	m := func(id uuid.UUID, h string) string {
		return `{"delivery_id":"` + id.String() + `","key_hash":"` + h + `"}`
	}
	a, b := uuid.New(), uuid.New()
	tooMany := make([]string, MaxTaskDeliveries+1)
	for i := range tooMany {
		tooMany[i] = m(uuid.New(), hash)
	}
	for name, c := range map[string]struct{ payload, want string }{
		"not JSON":           {`{"deliveries":[`, "unexpected end"},
		"empty":              {`{}`, "required"},
		"a member lacks one": {`{"deliveries":[` + m(a, hash) + `,{"delivery_id":"` + b.String() + `"}]}`, "deliveries[1]: delivery_id and key_hash are required"},
		"a member's hash":    {`{"deliveries":[` + m(a, hash) + `,` + m(b, `\u0000`) + `]}`, "deliveries[1]: key_hash is not"},
		"named twice":        {`{"deliveries":[` + m(a, hash) + `,` + m(a, hash) + `]}`, "named twice"},
		"both forms":         {`{"delivery_id":"` + a.String() + `","key_hash":"` + hash + `","deliveries":[` + m(b, hash) + `]}`, "not both"},
		"too many":           {`{"deliveries":[` + strings.Join(tooMany, ",") + `]}`, "at most 100"},
	} {
		if _, err := ParseTask([]byte(c.payload)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}
