package apikey

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/testenv"
)

// countingDB counts the look-ups that reach the database.
type countingDB struct {
	DB
	rows atomic.Int64
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.rows.Add(1)
	return c.DB.QueryRow(ctx, sql, args...)
}

// A key that authenticated is not looked up again for CacheTTL; a
// revocation by another process reaches this one within it, and one by
// this process at once.
func TestAuthenticatedKeysAreRememberedForCacheTTL(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	counted := &countingDB{DB: db.Pool}
	api, admin := NewService(counted), NewService(db.Pool) // two processes over one database
	clock := time.Now()
	api.now = func() time.Time { return clock }
	k, secret, err := admin.Create(ctx, "test", "shop backend", []Scope{ScopeCheckout})
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if got, err := api.Authenticate(ctx, secret); err != nil || got.ID != k.ID {
			t.Fatalf("Authenticate = %+v, %v", got, err)
		}
	}
	if n := counted.rows.Load(); n != 1 {
		t.Errorf("50 requests with one key looked it up %d times, want 1", n)
	}
	if _, err := admin.Revoke(ctx, "test", k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Authenticate(ctx, secret); err != nil {
		t.Errorf("within CacheTTL of another process's revocation: %v, want the remembered key", err)
	}
	clock = clock.Add(CacheTTL)
	if _, err := api.Authenticate(ctx, secret); !errors.Is(err, ErrInvalid) {
		t.Errorf("CacheTTL after the revocation: %v, want ErrInvalid", err)
	}

	// Revoked by the process that remembers it: at once.
	k2, secret2, err := api.Create(ctx, "test", "shop backend, next", []Scope{ScopeCheckout})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Authenticate(ctx, secret2); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Revoke(ctx, "test", k2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Authenticate(ctx, secret2); !errors.Is(err, ErrInvalid) {
		t.Errorf("after this process revoked it: %v, want ErrInvalid", err)
	}
}
