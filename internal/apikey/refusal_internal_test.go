package apikey

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/testenv"
)

// tracingDB records each statement that reaches the database and
// whether its row was there to scan.
type tracingDB struct {
	DB
	mu    sync.Mutex
	calls []call
}

type call struct {
	sql     string
	scanned bool // Scan found a row
}

func (d *tracingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return &tracedRow{Row: d.DB.QueryRow(ctx, sql, args...), db: d, sql: sql}
}

func (d *tracingDB) take() []call {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.calls
	d.calls = nil
	return c
}

type tracedRow struct {
	pgx.Row
	db  *tracingDB
	sql string
}

func (r *tracedRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	r.db.mu.Lock()
	r.db.calls = append(r.db.calls, call{sql: r.sql, scanned: err == nil})
	r.db.mu.Unlock()
	return err
}

// Which prefixes exist cannot be told from how a key is refused: an
// unknown prefix, a wrong secret of a live key's prefix, the right
// secret of a revoked key and a token of no key's shape at all each
// cost the one statement a live key costs, which returns a row to scan
// for each (the key's, or a stand-in's), and end in ErrInvalid.
func TestEveryRefusedKeyTakesTheSamePath(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	traced := &tracingDB{DB: db.Pool}
	keys := NewService(traced)
	k, secret, err := keys.Create(ctx, "test", "shop backend", []Scope{ScopeCheckout})
	if err != nil {
		t.Fatal(err)
	}
	_, revoked, err := keys.Create(ctx, "test", "old backend", []Scope{ScopeCheckout})
	if err != nil {
		t.Fatal(err)
	}
	revokedKey, err := keys.Authenticate(ctx, revoked)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Revoke(ctx, "test", revokedKey.ID); err != nil {
		t.Fatal(err)
	}
	rest := secret[len(k.Prefix)+1:]
	wrong := k.Prefix + "_" + rest[:len(rest)-1] + "A"
	if wrong == secret {
		wrong = k.Prefix + "_" + rest[:len(rest)-1] + "B"
	}
	traced.take()

	if _, err := keys.Authenticate(ctx, secret); err != nil {
		t.Fatal(err)
	}
	live := traced.take()
	if len(live) != 1 || !live[0].scanned {
		t.Fatalf("a live key's check: %+v, want one statement and its row", live)
	}
	for name, token := range map[string]string{
		"an unknown prefix":   "sekali_key_aaaaaaaaaaaaaaaa_" + rest,
		"a wrong secret":      wrong,
		"a revoked key":       revoked,
		"no secret":           k.Prefix,
		"the bare prefix":     Prefix,
		"not a key's shape":   "not-a-key",
		"an empty token":      "",
		"the secret alone":    rest,
		"another key's shape": "sekali_order_" + rest,
	} {
		if _, err := keys.Authenticate(ctx, token); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
		got := traced.take()
		if len(got) != 1 || got[0].sql != live[0].sql || !got[0].scanned {
			t.Errorf("%s: %d statements %+v, want the live key's one statement, its row scanned", name, len(got), got)
		}
	}
}
