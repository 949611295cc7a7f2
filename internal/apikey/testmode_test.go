package apikey_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// A test key is made like a live one and reads sekali_test_…; it
// authenticates as a test key, and a live key's secret under the test
// prefix (or the other way round) is no key. A test key never has the
// operators' scope, and a key replaces only a key of its own mode.
func TestTestKeys(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	keys := apikey.NewService(db.Pool)
	ctx := context.Background()
	k, secret, err := keys.CreateReplacing(ctx, "test", "shop CI", []apikey.Scope{apikey.ScopeCheckout}, uuid.Nil, apikey.ModeTest)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, apikey.TestPrefix) || !strings.HasPrefix(k.Prefix, apikey.TestPrefix) || k.Mode != apikey.ModeTest {
		t.Fatalf("a test key: secret %q, prefix %q, mode %q; want sekali_test_…, test", secret[:12], k.Prefix, k.Mode)
	}
	got, err := keys.Authenticate(ctx, secret)
	if err != nil || got.ID != k.ID || !got.Test() {
		t.Fatalf("Authenticate(test key) = %+v, %v; want the test key", got, err)
	}
	live, liveSecret, err := keys.Create(ctx, "test", "shop", []apikey.Scope{apikey.ScopeCheckout})
	if err != nil || live.Mode != apikey.ModeLive || !strings.HasPrefix(liveSecret, apikey.Prefix) {
		t.Fatalf("a live key: %+v, %v", live, err)
	}
	if got, err := keys.Authenticate(ctx, liveSecret); err != nil || got.Test() {
		t.Errorf("Authenticate(live key) = %+v, %v; want the live key", got, err)
	}
	for _, bad := range []string{
		apikey.Prefix + strings.TrimPrefix(secret, apikey.TestPrefix),
		apikey.TestPrefix + strings.TrimPrefix(liveSecret, apikey.Prefix),
	} {
		if _, err := keys.Authenticate(ctx, bad); !errors.Is(err, apikey.ErrInvalid) {
			t.Errorf("Authenticate(%q) = %v, want ErrInvalid: the prefix is part of the key", bad[:14], err)
		}
	}
	if _, _, err := keys.CreateReplacing(ctx, "test", "ops", []apikey.Scope{apikey.ScopeAdmin}, uuid.Nil, apikey.ModeTest); !errors.Is(err, apikey.ErrBadMode) {
		t.Errorf("a test operator key: %v, want ErrBadMode", err)
	}
	if _, _, err := keys.CreateReplacing(ctx, "test", "next", []apikey.Scope{apikey.ScopeCheckout}, k.ID, apikey.ModeLive); !errors.Is(err, apikey.ErrBadMode) {
		t.Errorf("a live key replacing a test key: %v, want ErrBadMode", err)
	}
	next, _, err := keys.CreateReplacing(ctx, "test", "CI next", []apikey.Scope{apikey.ScopeCheckout}, k.ID, apikey.ModeTest)
	if err != nil || next.Owner != k.Owner || !next.Test() {
		t.Errorf("a test key replacing a test key: %+v, %v; want its owner, test", next, err)
	}
	if _, err := apikey.ParseMode("sandbox"); !errors.Is(err, apikey.ErrBadMode) {
		t.Errorf("ParseMode(sandbox) = %v, want ErrBadMode", err)
	}
}
