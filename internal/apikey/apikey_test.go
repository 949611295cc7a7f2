package apikey_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/testenv"
)

func TestKeysAuthenticateUntilRevoked(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	keys := apikey.NewService(db.Pool)
	ctx := context.Background()
	k, secret, err := keys.Create(ctx, "test", "shop backend", []apikey.Scope{apikey.ScopeOrdersWrite})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, k.Prefix+"_") || !strings.HasPrefix(k.Prefix, apikey.Prefix) {
		t.Fatalf("secret %q, prefix %q", secret, k.Prefix)
	}
	got, err := keys.Authenticate(ctx, secret)
	if err != nil || got.ID != k.ID || !got.Has(apikey.ScopeOrdersWrite) || got.Has(apikey.ScopeOrdersRead) || got.Owner != k.ID {
		t.Fatalf("Authenticate = %+v, %v; want the key, its own owner", got, err)
	}
	// The secret is stored only as a hash.
	var stored []byte
	if err := db.Pool.QueryRow(ctx, "SELECT secret_hash FROM api_keys WHERE id = $1", k.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(stored), secret[len(k.Prefix)+1:]) || len(stored) != 32 {
		t.Errorf("stored %d bytes that hold the secret", len(stored))
	}
	// A second key is valid at the same time: rotation without downtime.
	// It replaces the first, whose owner it takes.
	_, next, err := keys.CreateReplacing(ctx, "test", "shop backend, next", []apikey.Scope{apikey.ScopeOrdersWrite}, k.ID, apikey.ModeLive)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"", "sekali_key_", secret + "x", lastCharChanged(secret), k.Prefix + "_wrong", "sekali_key_nosuchprefix_" + secret[len(k.Prefix)+1:], "Bearer " + secret,
		// Text PostgreSQL refuses, in the part looked up: no key either.
		"sekali_key_\xff_x", "sekali_key_a\x00_x", "sekali_test_\xc3_x", k.Prefix + "\x00" + secret[len(k.Prefix):],
	} {
		if _, err := keys.Authenticate(ctx, bad); !errors.Is(err, apikey.ErrInvalid) {
			t.Errorf("Authenticate(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := keys.Revoke(ctx, "test", k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Authenticate(ctx, secret); !errors.Is(err, apikey.ErrInvalid) {
		t.Errorf("a revoked key still authenticates: %v", err)
	}
	if got, err := keys.Authenticate(ctx, next); err != nil || got.Owner != k.ID {
		t.Errorf("the other key: %+v, %v; want it working, with the first key's owner", got, err)
	}
	list, err := keys.List(ctx)
	if err != nil || len(list) != 2 || list[0].RevokedAt == nil || list[1].RevokedAt != nil {
		t.Errorf("List = %+v, %v", list, err)
	}
}

func TestParseScopes(t *testing.T) {
	t.Parallel()
	got, err := apikey.ParseScopes([]string{"orders:write", " orders:read", "orders:write"})
	if err != nil || len(got) != 2 || got[0] != apikey.ScopeOrdersRead {
		t.Errorf("ParseScopes = %v, %v", got, err)
	}
	for _, bad := range [][]string{nil, {}, {"orders:delete"}, {"root"}} {
		if _, err := apikey.ParseScopes(bad); !errors.Is(err, apikey.ErrBadScope) {
			t.Errorf("ParseScopes(%q) = %v", bad, err)
		}
	}
}

// lastCharChanged is secret with its last character replaced by another
// one (always another: "A" unless it already ends in "A").
func lastCharChanged(secret string) string {
	last := "A"
	if strings.HasSuffix(secret, "A") {
		last = "B"
	}
	return secret[:len(secret)-1] + last
}

// A console session: only an admin key signs in; the session names its
// operator, ends on sign-out, and ends with its key.
func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	keys := apikey.NewService(db.Pool)
	_, backend, err := keys.Create(ctx, "test", "shop-backend", []apikey.Scope{apikey.ScopeOrdersWrite})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.SignIn(ctx, backend); !errors.Is(err, apikey.ErrNotOperator) {
		t.Errorf("a backend key signed in: %v", err)
	}
	if _, _, err := keys.SignIn(ctx, lastCharChanged(backend)); !errors.Is(err, apikey.ErrInvalid) {
		t.Errorf("a wrong key signed in: %v", err)
	}
	if _, _, err := keys.SignIn(ctx, "sekali_key_\xff\x00_x"); !errors.Is(err, apikey.ErrInvalid) {
		t.Errorf("a key of NUL and invalid UTF-8 signed in: %v", err)
	}
	ana, token, err := keys.Create(ctx, "test", "Ana", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	sess, secret, err := keys.SignIn(ctx, token)
	if err != nil || sess.Operator.ID != ana.ID || sess.CSRF == "" || secret == "" || secret == sess.CSRF {
		t.Fatalf("SignIn = %+v, %q, %v", sess, secret, err)
	}
	if got := sess.Actor(); got != "operator:Ana ("+ana.Prefix+")" {
		t.Errorf("Actor() = %q", got)
	}
	got, err := keys.Session(ctx, secret)
	if err != nil || got.Operator.ID != ana.ID || got.CSRF != sess.CSRF {
		t.Errorf("Session = %+v, %v", got, err)
	}
	if _, err := keys.Session(ctx, lastCharChanged(secret)); !errors.Is(err, apikey.ErrInvalid) {
		t.Errorf("another cookie value: %v", err)
	}
	if err := keys.SignOut(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Session(ctx, secret); !errors.Is(err, apikey.ErrInvalid) {
		t.Errorf("after sign-out: %v", err)
	}
	_, secret, err = keys.SignIn(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Revoke(ctx, "test", ana.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Session(ctx, secret); !errors.Is(err, apikey.ErrInvalid) {
		t.Errorf("after the key's revocation: %v", err)
	}
}
