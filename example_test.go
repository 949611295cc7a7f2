package sekali_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/sekali-dev/sekali"
)

// A shop's backend places the order of a cart, schedules a payment
// reminder and cancels it once the order is paid, and takes sekali's
// webhooks. (docs/client.md has this code; TestTheExampleRuns runs it
// against the real API.)
func Example_shopBackend() {
	ctx := context.Background()
	sk, err := sekali.NewClient(os.Getenv("SEKALI_URL"), // e.g. https://sekali.shop.example
		sekali.WithAPIKey(os.Getenv("SEKALI_API_KEY")))
	if err != nil {
		log.Fatal(err)
	}

	// The cart's id is the Idempotency-Key: however often this runs for
	// the cart (the client's own retries, a restart, a second click), it
	// makes one order and one confirmation.
	order, err := sk.PlaceOrder(ctx, sekali.Checkout{
		CustomerEmail: "ana@example.com",
		CustomerName:  "Ana",
		Currency:      "IDR",
		Locale:        "id-ID",
		Items:         []sekali.CheckoutItem{{SKU: "TEA-01", Name: "Teh melati", Quantity: 2, UnitPrice: 4_500_000}},
	}, sekali.WithIdempotencyKey("cart-1001"))
	var p *sekali.Problem
	switch {
	case errors.As(err, &p) && p.Type == sekali.ProblemValidation:
		for _, e := range p.Errors {
			log.Printf("checkout: %s: %s", e.Pointer, e.Detail) // /items/0/quantity: ...
		}
		return
	case err != nil:
		log.Fatal(err) // no answer after the retries, or another *sekali.Problem
	}
	// order.AccessToken lets the storefront read this one order:
	// sk.GetOrder(ctx, order.ID, sekali.WithOrderToken(order.AccessToken)).

	// A payment reminder tomorrow, unless the order is paid before.
	due := time.Now().Add(24 * time.Hour)
	reminder, err := sk.Notify(ctx, order.ID, sekali.Trigger{
		Template: "payment-reminder",
		EventID:  "due-1",
		SendAt:   due,
		Data: map[string]any{
			"order_id": order.ID, "customer_name": "Ana", "currency": "IDR", "amount_due": order.Total,
			"due_at": due.Add(48 * time.Hour), "payment_url": "https://shop.example/pay/cart-1001",
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	// ... paid:
	if _, err := sk.CancelNotifications(ctx, order.ID, "payment-reminder"); err != nil {
		log.Fatal(err)
	}
	// One notification, where it stands now (or a webhook event's
	// Data.NotificationID, read again).
	if n, err := sk.GetNotification(ctx, reminder.ID); err == nil {
		log.Printf("the reminder to %s is %s", n.Recipient, n.Status) // cancelled
	}

	// The endpoint sekali posts events to (registered by an operator,
	// who gave the shop its whsec_ secret).
	webhooks, err := sekali.NewWebhookVerifier(os.Getenv("SEKALI_WEBHOOK_SECRET"))
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("POST /hooks/sekali", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
		if err != nil {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		event, err := webhooks.Verify(r.Header, body) // the signature, and a timestamp within 5 minutes
		if err != nil {
			http.Error(w, "not from sekali", http.StatusUnauthorized)
			return
		}
		// Events come at least once: drop one whose event.ID was handled.
		switch event.Type {
		case sekali.EventBounced, sekali.EventFailed:
			log.Printf("order %s: %s did not reach %s: %s", event.Data.OrderID, event.Data.Template, event.Data.Recipient, event.Data.Reason)
		case sekali.EventSent:
			log.Printf("order %s: %s sent", event.Data.OrderID, event.Data.Template)
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
