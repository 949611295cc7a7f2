package order

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/notify"
)

// TemplateShipped is the e-mail an order gets each time a shipment of it
// is recorded (Ship).
const TemplateShipped = "order-shipped"

// Shipment is what the warehouse reports when an order leaves.
type Shipment struct {
	Carrier        string
	TrackingNumber string
}

// shippedData is the snapshot the order-shipped template renders.
type shippedData struct {
	OrderID        uuid.UUID     `json:"order_id"`
	Reference      string        `json:"reference,omitempty"`
	CustomerName   string        `json:"customer_name"`
	Carrier        string        `json:"carrier"`
	TrackingNumber string        `json:"tracking_number"`
	Items          []shippedItem `json:"items"`
	ShippedAt      time.Time     `json:"shipped_at"`
}

type shippedItem struct {
	SKU      string `json:"sku"`
	Name     string `json:"name"`
	Quantity int32  `json:"quantity"`
}

func (s Shipment) validate() (Shipment, error) {
	var verr ValidationError
	v := Shipment{Carrier: strings.TrimSpace(s.Carrier), TrackingNumber: strings.TrimSpace(s.TrackingNumber)}
	checkText(&verr, "/carrier", v.Carrier, 100)
	checkText(&verr, "/tracking_number", v.TrackingNumber, 100)
	if len(verr.Fields) > 0 {
		return Shipment{}, &verr
	}
	return v, nil
}

// Ship records a shipment of an order and the intent to tell its
// customer, owned by caller's owner, through the same path as the generic
// trigger (recordAbout), in one transaction. Each shipment is its own
// event: a second parcel (another carrier or tracking number) is another
// shipment and another e-mail, keyed by the shipment
// (order-shipped:<orderId>:<shipmentId>:<email>), so that no earlier
// shipment or trigger, whoever made it, can stand in for this one. The
// same shipment again returns the notification recorded the first time
// (created=false) and queues nothing new.
func (s *Service) Ship(ctx context.Context, orderID uuid.UUID, sh Shipment, caller Caller) (n Notification, created bool, err error) {
	sh, err = sh.validate()
	if err != nil {
		return Notification{}, false, err
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	var d notify.Delivery
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		o, err := getOrderFor(ctx, q, orderID, caller)
		if err != nil {
			return err
		}
		id := uuid.Must(uuid.NewV7())
		event, key := id.String(), &caller.Key
		if caller.Anonymous() {
			key = nil
		}
		row, err := q.InsertShipment(ctx, dbsqlc.InsertShipmentParams{
			ID: id, OrderID: o.ID, Carrier: sh.Carrier, TrackingNumber: sh.TrackingNumber, ShippedAt: now,
			KeyID: key, OwnerID: &caller.Owner, EventID: &event,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			row, err = q.GetShipment(ctx, dbsqlc.GetShipmentParams{OrderID: o.ID, Carrier: sh.Carrier, TrackingNumber: sh.TrackingNumber})
		}
		if err != nil {
			return fmt.Errorf("record shipment of order %s: %w", orderID, err)
		}
		rows, err := q.ListOrderItems(ctx, orderID)
		if err != nil {
			return fmt.Errorf("list items of order %s: %w", orderID, err)
		}
		items := make([]shippedItem, len(rows))
		for i, r := range rows {
			items[i] = shippedItem{SKU: r.Sku, Name: r.Name, Quantity: r.Quantity}
		}
		d, created, err = recordAbout(ctx, tx, o, caller, TemplateShipped, derefString(row.EventID), o.CustomerEmail, shippedData{
			OrderID:        o.ID,
			Reference:      derefString(o.Reference),
			CustomerName:   o.CustomerName,
			Carrier:        row.Carrier,
			TrackingNumber: row.TrackingNumber,
			Items:          items,
			ShippedAt:      row.ShippedAt.UTC(),
		}, time.Time{}, now)
		if err != nil || !created {
			return err
		}
		if err := q.SetShipmentDelivery(ctx, dbsqlc.SetShipmentDeliveryParams{ID: row.ID, DeliveryID: &d.ID}); err != nil {
			return fmt.Errorf("record the e-mail of shipment %s: %w", row.ID, err)
		}
		return nil
	})
	if err != nil {
		return Notification{}, false, err
	}
	if created {
		s.enqueuer.EnqueueAfterCommit(ctx, []notify.Delivery{d})
	}
	return notificationsOf([]notify.Delivery{d})[0], created, nil
}

// shipmentsOf converts an order's recorded shipments.
func shipmentsOf(rows []dbsqlc.Shipment) []ShipmentRecord {
	if len(rows) == 0 {
		return nil
	}
	out := make([]ShipmentRecord, len(rows))
	for i, r := range rows {
		out[i] = ShipmentRecord{ID: r.ID, Carrier: r.Carrier, TrackingNumber: r.TrackingNumber, ShippedAt: r.ShippedAt.UTC(), NotificationID: r.DeliveryID}
	}
	return out
}
