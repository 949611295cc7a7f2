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
	"github.com/sekali-dev/sekali/internal/resend"
	"github.com/sekali-dev/sekali/internal/resend/resendtest"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The shop cancels its reminders at the very moment they fall due, while
// two workers claim them: every reminder ends cancelled with no e-mail
// (its cancel answered 200) or sent once (its cancel answered 409), never
// both and never neither. The cancels run from before the time to well
// past asynq's moving of due tasks (1 s), so both sides of the race run;
// a run in which either never did fails rather than passing untested.
func TestCancelRacesTheWorkers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration { return 20 * time.Millisecond }})
	_, key, err := apikey.NewService(c.db.Pool).Create(context.Background(), "test", "chaos shop", []apikey.Scope{apikey.ScopeNotificationsWrite})
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

	// The cancels arrive spread over the 3 s from a second before the time: asynq moves
	// a due task to the workers within its check interval (1 s), so some
	// reminders are claimed before their cancel and some after.
	time.Sleep(time.Until(due.Add(-time.Second)))
	answers := make([]int, n)
	var wg sync.WaitGroup
	for i, id := range reminders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 100 * time.Millisecond)
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
	if cancelled == 0 || cancelled == n {
		t.Errorf("%d of %d reminders cancelled: one side of the race never ran", cancelled, n)
	}
	c.verdict("cancel races two workers at the reminders' time", expect{mayCancel: true})
}

// Resend takes each confirmation and answers 500 (its answer lost on the
// way back), and the shop cancels each 0.3 s after its first hand-over,
// while the delivery waits, pinned to Resend, for its retry under the
// same key. No cancel is believed: each is refused (409: may have been
// sent, or already sent), every delivery ends sent, Resend holds one
// e-mail per order, and nothing is ever recorded cancelled.
func TestCancelAfterALostAnswer(t *testing.T) {
	t.Parallel()
	c := newResendCluster(t)
	const n = 6
	faults := make([]resendtest.Fault, n)
	for i := range faults {
		faults[i] = resendtest.Fault{Status: 500, Name: "application_error", Message: "An unexpected error occurred.", Sent: true}
	}
	c.resend.FailNext(faults...)
	c.startAPI()
	c.startWorker()
	c.startWorker()
	c.startReconciler()
	c.placeOrders("cancel-lost", n)

	answers := make([]int, n)
	bodies := make([]string, n)
	var wg sync.WaitGroup
	for i, o := range c.orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(30 * time.Second)
			for c.resend.CountByIdempotencyKey(resend.IdempotencyKey(o.Key)) == 0 {
				if time.Now().After(deadline) {
					t.Errorf("order %d never reached Resend", i)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond)
			var raw []byte
			answers[i], raw = c.post(c.backendKey, "/v1/notifications/"+o.DeliveryID.String()+"/cancel", "")
			bodies[i] = string(raw)
		}()
	}
	wg.Wait()
	c.settled(90 * time.Second)
	mayHave := 0
	for i := range answers {
		switch {
		case answers[i] == http.StatusConflict && strings.Contains(bodies[i], "urn:sekali:problem:may-have-been-sent"):
			mayHave++
		case answers[i] == http.StatusConflict:
		default:
			t.Errorf("order %d: the cancel after a lost answer answered %d %s, want 409", i, answers[i], bodies[i])
		}
	}
	var cancelledEvents int
	if err := c.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM delivery_events WHERE event = 'cancelled'").Scan(&cancelledEvents); err != nil {
		t.Fatal(err)
	}
	if cancelledEvents != 0 {
		t.Errorf("%d deliveries recorded cancelled after Resend took them", cancelledEvents)
	}
	t.Logf("%d of %d cancels refused as may-have-been-sent, the others as too late", mayHave, n)
	c.verdict("cancel after Resend took the message and its answer was lost", expect{})
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

// Resend takes every confirmation and answers 500 (its answer lost),
// and its probe fails too, so that each delivery waits, pinned to Resend
// and in doubt, for its retry under the same key. Meanwhile an operator
// suppresses the recipients (one run), or the deliveries pass
// DELIVERY_MAX_AGE (the other). Neither may tell the shop "not sent" of
// a message Resend holds: a delivery in doubt is never suppressed or
// failed. Resend has no look-up that could tell, and sending again
// under the key would mail a suppressed or expired recipient if Resend
// did not have it, so each is held for an operator, and Resend holds
// the one e-mail it took.
func TestSuppressionOrExpiryDuringALostAnswer(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"suppression", "expiry"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			c := newResendCluster(t)
			const n = 6
			c.resend.SetOutage(&resendtest.Fault{Status: 500, Name: "application_error", Message: "An unexpected error occurred.", Sent: true})
			// Each first attempt is held at Resend until all have come, so
			// that no 500 opens a worker's breaker before every delivery
			// has had its one attempt.
			arrivals := make([]<-chan struct{}, n)
			releases := make([]func(), n)
			for i := range n {
				arrivals[i], releases[i] = c.resend.HoldNext()
			}
			var maxAge []string
			if by == "expiry" {
				maxAge = []string{"DELIVERY_MAX_AGE", "15s"}
			}
			c.startAPI()
			c.startWorker(maxAge...)
			c.startWorker(maxAge...)
			c.startReconciler(maxAge...)
			c.placeOrders("doubt-"+by, n)
			for _, arrived := range arrivals {
				select {
				case <-arrived:
				case <-time.After(60 * time.Second):
					t.Fatal("not every first attempt reached Resend")
				}
			}
			for _, release := range releases {
				release()
			}
			testenv.WaitFor(t, "every delivery in doubt", 30*time.Second, func() bool {
				var inDoubt int
				err := c.db.Pool.QueryRow(context.Background(),
					"SELECT count(*) FROM notification_deliveries WHERE unsettled_since IS NOT NULL").Scan(&inDoubt)
				return err == nil && inDoubt == n
			})
			switch by {
			case "suppression":
				for _, o := range c.orders {
					if status, body := c.postAdmin("/admin/v1/suppressions", `{"recipient":"`+o.Email+`","note":"complaint from customer"}`); status != http.StatusCreated && status != http.StatusOK {
						t.Fatalf("suppress %s: %d %s", o.Email, status, body)
					}
				}
			case "expiry":
				time.Sleep(16 * time.Second) // past DELIVERY_MAX_AGE, still down
			}
			testenv.WaitFor(t, "every delivery held", 60*time.Second, func() bool {
				var held int
				err := c.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM notification_deliveries WHERE status = 'held'").Scan(&held)
				return err == nil && held == n
			})
			c.resend.SetOutage(nil)
			time.Sleep(3 * time.Second) // Resend back: nothing may now send the held ones again
			var notSent int
			if err := c.db.Pool.QueryRow(context.Background(),
				"SELECT count(*) FROM delivery_events WHERE to_status IN ('suppressed', 'failed', 'cancelled')").Scan(&notSent); err != nil {
				t.Fatal(err)
			}
			if notSent != 0 {
				t.Errorf("%d deliveries were told the shop as not sent while Resend may have held them", notSent)
			}
			taken := 0
			for _, o := range c.orders {
				got := c.resend.CountByIdempotencyKey(resend.IdempotencyKey(o.Key))
				if got > 1 {
					t.Errorf("%s: %d e-mails at Resend", o.Email, got)
				}
				taken += got
				var status, lastError string
				if err := c.db.Pool.QueryRow(context.Background(), "SELECT status, last_error FROM notification_deliveries WHERE id = $1",
					o.DeliveryID).Scan(&status, &lastError); err != nil {
					t.Fatal(err)
				}
				if status != "held" || !strings.Contains(lastError, "no look-up") {
					t.Errorf("%s: %s (%s), want held for an operator: Resend cannot be asked", o.Email, status, lastError)
				}
			}
			if want := n; taken != want {
				t.Errorf("Resend holds %d e-mails, want the %d it took with the answers lost", taken, want)
			}
			t.Logf("%s during a lost answer: %d held, %d of them taken by Resend, none told as not sent", by, n, taken)
		})
	}
}
