package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
)

// maxBodyBytes bounds a request body; a checkout of MaxItems lines with
// long names fits in well under this.
const maxBodyBytes = 64 << 10

// checkoutRequest is the JSON body of POST /v1/orders. Items are decoded
// one by one so that an error can name the item it is in.
type checkoutRequest struct {
	CustomerEmail string            `json:"customer_email"`
	CustomerName  string            `json:"customer_name"`
	Currency      string            `json:"currency"`
	Items         []json.RawMessage `json:"items"`
	Locale        string            `json:"locale"`
	Reference     string            `json:"reference"`
}

type checkoutItemRequest struct {
	SKU       string `json:"sku"`
	Name      string `json:"name"`
	Quantity  int64  `json:"quantity"`
	UnitPrice *int64 `json:"unit_price"`
}

// handleCreateOrder records a checkout: from the shop's server with an
// API key, or, in public mode, from anyone (routes.go decides who gets
// here; order.PublicRules what an anonymous checkout may ask, its cap per
// client counting the client as addr names it).
func handleCreateOrder(orders *order.Service, addr func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller := callerOf(r)
		caller.Client = addr(r)
		key, p := idempotencyKeyOf(r)
		if p == nil && key != "" && caller.Anonymous() {
			p = anonymousKeyProblem(key)
		}
		if p != nil {
			writeProblem(w, r, *p)
			return
		}
		c, p := decodeCheckout(w, r)
		if p != nil {
			writeProblem(w, r, *p)
			return
		}
		placed, err := orders.Place(r.Context(), c, caller, key)
		if err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("order_id", placed.ID.String()), slog.Bool("idempotent_replay", placed.Replayed))
		w.Header().Set("Location", "/v1/orders/"+placed.ID.String())
		if placed.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		// As recorded: a replay is the first answer, byte for byte.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(placed.JSON) // the status is out; a broken connection has nobody to tell
	})
}

func handleGetOrder(orders *order.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := orderIDOf(w, r)
		if !ok {
			return
		}
		o, err := orders.Get(r.Context(), id, callerOf(r))
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, o)
	})
}

// shipmentRequest is the JSON body of POST /v1/orders/{id}/shipments.
type shipmentRequest struct {
	Carrier        string `json:"carrier"`
	TrackingNumber string `json:"tracking_number"`
}

// handleCreateShipment records a shipment of an order and queues its
// order-shipped e-mail: 201 for a new shipment (a second parcel is one),
// 200 with the same notification when this carrier and tracking number
// were recorded already.
func handleCreateShipment(orders *order.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := orderIDOf(w, r)
		if !ok {
			return
		}
		var req shipmentRequest
		if !decodeJSON(w, r, &req) {
			return
		}
		n, created, err := orders.Ship(r.Context(), id, order.Shipment{Carrier: req.Carrier, TrackingNumber: req.TrackingNumber}, callerOf(r))
		if err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("order_id", id.String()), slog.String("delivery_id", n.ID.String()))
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		writeJSON(w, status, n)
	})
}

// notificationRequest is the JSON body of POST /v1/orders/{id}/notifications.
type notificationRequest struct {
	Template  string          `json:"template"`
	Data      json.RawMessage `json:"data"`
	EventID   string          `json:"event_id"`
	Recipient string          `json:"recipient"`
	SendAt    string          `json:"send_at"` // RFC 3339, with its offset
}

// handleCreateNotification is the one trigger for any template but those
// an endpoint of their own sends (the checkout, the shipments): it
// records the intent (validated against the template's schema) and
// queues it; 201 the first time, 200 with the same notification when
// that event was already recorded with the same data, 409
// notification-conflict when with other data. It honours
// Idempotency-Key like the checkout.
func handleCreateNotification(orders *order.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := orderIDOf(w, r)
		if !ok {
			return
		}
		key, p := idempotencyKeyOf(r)
		if p != nil {
			writeProblem(w, r, *p)
			return
		}
		var req notificationRequest
		if !decodeJSON(w, r, &req) {
			return
		}
		n, created, replayed, err := orders.Notify(r.Context(), id, order.Trigger{
			Template: req.Template, Data: req.Data, EventID: req.EventID, Recipient: req.Recipient, SendAt: req.SendAt,
		}, callerOf(r), key)
		if err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("order_id", id.String()), slog.String("delivery_id", n.ID.String()),
			slog.String("template", n.Template), slog.Bool("idempotent_replay", replayed))
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		writeJSON(w, status, n)
	})
}

// handleGetNotification reads one notification, for the keys that may
// cancel it: its owner's, or its order's owner's.
func handleGetNotification(orders *order.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := uuidParam(w, r, "No notification has this id: notification ids are UUIDs.")
		if !ok {
			return
		}
		addLogAttrs(r.Context(), slog.String("delivery_id", id.String()))
		n, err := orders.GetNotification(r.Context(), id, callerOf(r))
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, n)
	})
}

// handleCancelNotification calls a pending notification off: 200 with it
// cancelled, the same again for a second call; 409 with where it stands
// once a worker has claimed it, or when a provider may already have it;
// 404 for one the key may not cancel (another owner's, on an order
// another owner placed), as for one that does not exist.
func handleCancelNotification(orders *order.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := uuidParam(w, r, "No notification has this id: notification ids are UUIDs.")
		if !ok {
			return
		}
		n, err := orders.CancelNotification(r.Context(), id, callerOf(r))
		addLogAttrs(r.Context(), slog.String("delivery_id", id.String()))
		switch {
		case errors.Is(err, notify.ErrMayHaveBeenSent):
			writeProblem(w, r, mayHaveBeenSent(err, &n))
		case errors.Is(err, notify.ErrWrongState):
			writeProblem(w, r, problem{Type: typeConflict, Status: http.StatusConflict, Title: "Too late to cancel",
				Detail: "The notification is " + n.Status + ": only a pending one can be cancelled.", Notification: &n})
		case err != nil:
			writeError(w, r, err)
		default:
			writeJSON(w, http.StatusOK, n)
		}
	})
}

// cancelRequest names the template whose pending notifications of an
// order to cancel.
type cancelRequest struct {
	Template string `json:"template"`
}

// handleCancelTemplate calls off every pending notification of a
// template for an order (it was paid: no reminder), and says which were
// cancelled and which were too far along.
func handleCancelTemplate(orders *order.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := orderIDOf(w, r)
		if !ok {
			return
		}
		var req cancelRequest
		if !decodeJSON(w, r, &req) {
			return
		}
		cancelled, notCancelled, err := orders.CancelTemplate(r.Context(), id, req.Template, callerOf(r))
		if err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("order_id", id.String()), slog.String("template", req.Template),
			slog.Int("cancelled", len(cancelled)), slog.Int("not_cancelled", len(notCancelled)))
		writeJSON(w, http.StatusOK, map[string]any{"cancelled": cancelled, "not_cancelled": notCancelled})
	})
}

// orderIDOf parses the {id} path parameter; an id that is not a UUID
// names no order.
func orderIDOf(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	return uuidParam(w, r, "No order has this id: order ids are UUIDs.")
}

// uuidParam parses the {id} path parameter; an id that is not a UUID is
// answered with a 404 that says notFound.
func uuidParam(w http.ResponseWriter, r *http.Request, notFound string) (uuid.UUID, bool) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound, Detail: notFound})
		return uuid.Nil, false
	}
	return id, true
}

// idempotencyKeyOf reads the Idempotency-Key header. The draft standard
// sends it as a structured-field string ("..."); a bare token is accepted
// too. Absent means the request is not idempotent.
func idempotencyKeyOf(r *http.Request) (string, *problem) {
	values := r.Header.Values("Idempotency-Key")
	if len(values) == 0 {
		return "", nil
	}
	bad := &problem{Type: typeInvalidKey, Status: http.StatusBadRequest,
		Title:  "Invalid Idempotency-Key header",
		Detail: "Send one Idempotency-Key of 1 to 255 visible ASCII characters, such as a UUID."}
	if len(values) > 1 {
		return "", bad
	}
	k := strings.TrimSpace(values[0])
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	if k == "" || len(k) > 255 {
		return "", bad
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] >= 0x7f || k[i] == '"' || k[i] == '\\' {
			return "", bad
		}
	}
	return k, nil
}

// callerOf is who sent r, as far as the order package cares: its API key,
// or nobody.
func callerOf(r *http.Request) order.Caller {
	k, _ := keyFrom(r.Context())
	return order.Caller{Key: k.ID, Owner: k.Owner, Test: k.Test()}
}

// anonymousKeyProblem refuses an anonymous caller's Idempotency-Key that
// is not a random UUID. The anonymous callers share one space of keys,
// and a key's replay answers with the order's access token: a key
// someone else could guess (order-12, a timestamp) would open the order
// to them. A version 4 UUID has 122 random bits, a version 7 at least 74.
func anonymousKeyProblem(key string) *problem {
	if id, err := uuid.Parse(key); err == nil && len(key) == 36 && (id.Version() == 4 || id.Version() == 7) {
		return nil
	}
	return &problem{Type: typeInvalidKey, Status: http.StatusBadRequest, Title: "Invalid Idempotency-Key header",
		Detail: "A checkout without an API key must use a random UUID (version 4 or 7) as its Idempotency-Key, such as crypto.randomUUID() makes."}
}

// decodeCheckout reads a JSON checkout, refusing what is not JSON, too
// large, has unknown fields or values of the wrong type, each with a
// problem that names the field. The body is checked once, whole; its
// items are decoded one by one only so that an error can name its item.
func decodeCheckout(w http.ResponseWriter, r *http.Request) (order.Checkout, *problem) {
	raw, p := readJSONBody(w, r)
	if p != nil {
		return order.Checkout{}, p
	}
	var req checkoutRequest
	if p := decodeStrict(raw, &req, ""); p != nil {
		return order.Checkout{}, p
	}
	c := order.Checkout{
		CustomerEmail: req.CustomerEmail,
		CustomerName:  req.CustomerName,
		Currency:      req.Currency,
		Items:         make([]order.CheckoutItem, len(req.Items)),
		Locale:        req.Locale,
		Reference:     req.Reference,
	}
	for i, rawItem := range req.Items {
		var it checkoutItemRequest
		if p := decodeChecked(rawItem, &it, "/items/"+strconv.Itoa(i)); p != nil {
			return order.Checkout{}, p
		}
		c.Items[i] = order.CheckoutItem{SKU: it.SKU, Name: it.Name, Quantity: it.Quantity, UnitPrice: it.UnitPrice}
	}
	return c, nil
}
