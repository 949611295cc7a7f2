package notify

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// A task delivered twice at once (the Redis lock lost) can put the same
// delivery twice into one claim batch: it is taken once, under the first
// claim's lease, and the second claim meets it taken ("leased"), as it
// would one statement later. Sent to PostgreSQL twice, the row would be
// locked again after the statement's own update and left out: the
// second claim would read "no such delivery" and drop its task.
func TestClaimAllJudgesARowAskedForTwiceOnce(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	id, key := uuid.New(), "order-confirmation:"+uuid.NewString()+":ana@example.com"
	if err := dbsqlc.New(db.Pool).InsertCheckout(ctx, dbsqlc.InsertCheckoutParams{
		ID: uuid.New(), CustomerEmail: "ana@example.com", CustomerName: "Ana", Currency: "IDR", TotalMinor: 9000000,
		CreatedAt: time.Now(), AccessTokenHash: make([]byte, 32),
		LineNos: []int32{1}, Skus: []string{"TEA-01"}, Names: []string{"Teh melati"}, Quantities: []int32{2}, UnitPricesMinor: []int64{4500000},
		DeliveryID: id, Template: "order-confirmation", Recipient: "ana@example.com", IdempotencyKey: key, TemplateData: []byte(`{}`),
	}); err != nil {
		t.Fatal(err)
	}
	claim := func() Claim {
		return Claim{ID: id, KeyHash: mail.KeyHash(key), MessageID: mail.MessageID(key, "shop.example"), TaskID: "t",
			Templates: []string{"order-confirmation"}, MaxAge: time.Hour, Lease: Lease{Token: uuid.New(), TTL: time.Minute, Actor: t.Name()}}
	}
	cs := []Claim{claim(), claim()}
	rows, err := ClaimAll(ctx, postgres.GenericPlans{DB: db.Pool}, cs)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0] == nil || rows[0].Verdict != VerdictClaimed || *rows[0].Delivery.leaseToken != cs[0].Lease.Token {
		t.Fatalf("first claim: %+v, want claimed under its lease", rows[0])
	}
	if rows[1] == nil || rows[1].Verdict != VerdictLeased {
		t.Fatalf("second claim: %+v, want leased (taken by the first)", rows[1])
	}
	var attempts int32
	if err := db.Pool.QueryRow(ctx, "SELECT attempts FROM notification_deliveries WHERE id = $1", id).Scan(&attempts); err != nil || attempts != 1 {
		t.Errorf("attempts = %d, %v; want 1", attempts, err)
	}
}
