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

// IsOperator knows the prefixes of the live operator keys, from a
// creation or a revocation through the service at once; PrefixOf reads
// a key's public part from a token of a key's shape only.
func TestIsOperator(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	keys := apikey.NewService(db.Pool)
	ctx := context.Background()
	op, opSecret, err := keys.Create(ctx, "test", "Ana", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	backend, _, err := keys.Create(ctx, "test", "shop backend", []apikey.Scope{apikey.ScopeCheckout})
	if err != nil {
		t.Fatal(err)
	}
	is := func(prefix string) bool {
		t.Helper()
		ok, err := keys.IsOperator(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !is(op.Prefix) || is(backend.Prefix) || is("sekali_key_nosuchprefix") {
		t.Errorf("IsOperator: the operator's %v, the backend's %v, an unknown one %v; want true, false, false",
			is(op.Prefix), is(backend.Prefix), is("sekali_key_nosuchprefix"))
	}
	if _, err := keys.Revoke(ctx, "test", op.ID); err != nil {
		t.Fatal(err)
	}
	if is(op.Prefix) {
		t.Error("a revoked operator key is still an operator's")
	}
	next, _, err := keys.Create(ctx, "test", "Budi", []apikey.Scope{apikey.ScopeAdmin, apikey.ScopeOrdersRead})
	if err != nil {
		t.Fatal(err)
	}
	if !is(next.Prefix) {
		t.Error("a new operator key is not known at once")
	}

	for token, want := range map[string]string{
		opSecret:                     op.Prefix,
		"sekali_key_abc_def":         "sekali_key_abc",
		"sekali_test_abc_def":        "sekali_test_abc",
		"sekali_key_abc":             "", // no secret part
		"sekali_key__def":            "",
		"a-guess-at-the-admin-token": "",
		"xsekali_key_abc_def":        "",
		"sekali_order_abc_def":       "",
	} {
		if got, ok := apikey.PrefixOf(token); got != want || ok != (want != "") {
			t.Errorf("PrefixOf(%q) = %q, %v; want %q", token, got, ok, want)
		}
	}
}
