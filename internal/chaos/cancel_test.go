package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/smtpsink"
)

// The shop cancels its reminders at the very moment they fall due, while
// two workers claim them: every reminder ends cancelled with no e-mail
// (its cancel answered 200) or sent once (its cancel answered 409), never
// both and never neither.
func TestCancelRacesTheWorkers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 20 * time.Millisecond }})
	_, key, err := apikey.NewService(c.db.Pool).Create(context.Background(), "chaos shop", []apikey.Scope{apikey.ScopeNotificationsWrite})
	if err != nil {
		t.Fatal(err)
	}
	c.startAPI()
	c.startWorker()
	c.startWorker()
	c.startReconciler()
	const n = 30
	c.placeOrders("cancel", n)

	due := time.Now().Add(3 * time.Second)
	reminders := make([]uuid.UUID, n)
	for i, o := range c.orders {
		data := fmt.Sprintf(`{"order_id":%q,"customer_name":"Chaos","carrier":"JNE","tracking_number":"R%d",`+
			`"items":[{"sku":"K1","name":"Kopi","quantity":1}],"shipped_at":"2026-12-01T10:00:00Z"}`, o.OrderID, i)
		status, body := c.post(key, "/v1/orders/"+o.OrderID.String()+"/notifications",
			`{"template":"order-shipped","event_id":"reminder","send_at":"`+due.Format(time.RFC3339Nano)+`","data":`+data+`}`)
		var got struct {
			ID uuid.UUID `json:"id"`
		}
		if status != http.StatusCreated || json.Unmarshal(body, &got) != nil {
			t.Fatalf("schedule reminder %d: %d %s", i, status, body)
		}
		reminders[i] = got.ID
	}

	// The cancels arrive spread over the 2 s around the time: asynq moves
	// a due task to the workers within its check interval (1 s), so some
	// reminders are claimed before their cancel and some after.
	time.Sleep(time.Until(due.Add(-100 * time.Millisecond)))
	answers := make([]int, n)
	var wg sync.WaitGroup
	for i, id := range reminders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 65 * time.Millisecond)
			answers[i], _ = c.post(key, "/v1/notifications/"+id.String()+"/cancel", "")
		}()
	}
	wg.Wait()
	c.settled(60 * time.Second)

	cancelled := 0
	for i, id := range reminders {
		d, err := notify.Get(context.Background(), c.db.Pool, id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case d.Status == notify.StatusCancelled && answers[i] == http.StatusOK:
			cancelled++
		case d.Status == notify.StatusSent && answers[i] == http.StatusConflict:
		default:
			t.Errorf("reminder %d: %s, its cancel answered %d", i, d.Status, answers[i])
		}
	}
	t.Logf("%d reminders cancelled, %d sent", cancelled, n-cancelled)
	c.verdict("cancel races two workers at the reminders' time", expect{mayCancel: true})
}

// post sends body (JSON, or nothing) to the API with key and returns the
// status and the answer.
func (c *cluster) post(key, path, body string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.apiURL+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		c.t.Errorf("POST %s: %v", path, err)
		return 0, nil
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}
