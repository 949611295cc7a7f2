package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// `api keys create` prints a key that authenticates with its scopes, and
// holds the name to the rule the admin API applies: one line of visible
// text, no direction overrides.
func TestKeysCreate(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	env := func(k string) string { return map[string]string{"DATABASE_URL": db.URL}[k] }
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"keys", "create", "--name", "shop-backend-2026-12", "--scopes", "orders:read,orders:write"}, env, &out, &errOut); err != nil {
		t.Fatalf("keys create: %v\n%s", err, errOut.String())
	}
	k, err := apikey.NewService(db.Pool).Authenticate(context.Background(), strings.TrimSpace(out.String()))
	if err != nil || k.Name != "shop-backend-2026-12" || !k.Has(apikey.ScopeOrdersWrite) {
		t.Fatalf("the printed key: %+v, %v; want it to authenticate as shop-backend-2026-12 with orders:write", k, err)
	}

	for _, name := range []string{"shop\u202Ebackend", "shop\u2028backend", "\u200B\u200B"} {
		out.Reset()
		err := run(context.Background(), []string{"keys", "create", "--name", name, "--scopes", "orders:read"}, env, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), "--name") || out.Len() != 0 {
			t.Errorf("name %q: err %v, printed %q; want it refused, naming --name, and no key", name, err, out.String())
		}
	}
	keys, err := apikey.NewService(db.Pool).List(context.Background())
	if err != nil || len(keys) != 1 {
		t.Errorf("%d keys stored (%v), want only the good one", len(keys), err)
	}

	// Recorded as the host's command line did it.
	host, _ := os.Hostname()
	actions, err := notify.NewOperator(db.Pool, nil, nil, nil).Actions(context.Background(), 0, 10)
	if err != nil || len(actions) != 1 {
		t.Fatalf("operator actions: %+v, %v; want the one key's creation", actions, err)
	}
	if a := actions[0]; a.Action != "api_key.create" || a.Target != "api_key:"+k.Prefix ||
		!strings.HasPrefix(a.Actor, "cli:") || !strings.HasSuffix(a.Actor, "@"+host) {
		t.Errorf("the key's creation is recorded as %s on %s by %q, want api_key.create on api_key:%s by cli:<user>@%s", a.Action, a.Target, a.Actor, k.Prefix, host)
	}
}

// `api --help` prints the commands, keys list and revoke among them, and
// is not a failure; an unknown command prints them and fails.
func TestHelp(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	for _, arg := range []string{"--help", "-h", "help"} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{arg}, none, &out, &errOut); err != nil {
			t.Errorf("api %s: %v", arg, err)
		}
		for _, want := range []string{"usage: api", "keys create --name NAME", "keys list", "keys revoke KEY", "templates check DIR", "DATABASE_URL"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("api %s printed no %q:\n%s", arg, want, out.String())
			}
		}
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"serve"}, none, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "api --help") || !strings.Contains(errOut.String(), "keys revoke KEY") {
		t.Errorf("api serve: %v, printed %q; want an error and the usage", err, errOut.String())
	}
	errOut.Reset()
	if err := run(context.Background(), []string{"keys", "create", "--help"}, none, &out, &errOut); !errors.Is(err, flag.ErrHelp) ||
		!strings.Contains(errOut.String(), "-scopes") {
		t.Errorf("api keys create --help: %v, printed %q; want its flags and flag.ErrHelp (which exits 0)", err, errOut.String())
	}
}

// `api keys list` shows every key without its secret, and `api keys
// revoke` ends one named by its prefix or its id, recorded as the
// host's command line did it.
func TestKeysListAndRevoke(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	env := func(k string) string { return map[string]string{"DATABASE_URL": db.URL}[k] }
	ctx := context.Background()
	keys := apikey.NewService(db.Pool)
	shop, shopSecret, err := keys.Create(ctx, "test", "shop backend", []apikey.Scope{apikey.ScopeCheckout, apikey.ScopeOrdersRead})
	if err != nil {
		t.Fatal(err)
	}
	ci, _, err := keys.CreateReplacing(ctx, "test", "shop CI", []apikey.Scope{apikey.ScopeCheckout}, uuid.Nil, apikey.ModeTest)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"keys", "list"}, env, &out, &errOut); err != nil {
		t.Fatalf("keys list: %v\n%s", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "PREFIX") ||
		!strings.Contains(lines[1], shop.ID.String()) || !strings.Contains(lines[1], shop.Prefix) || !strings.Contains(lines[1], "shop backend") ||
		!strings.Contains(lines[1], "live") || !strings.Contains(lines[1], "checkout,orders:read") ||
		!strings.Contains(lines[2], ci.Prefix) || !strings.Contains(lines[2], "test") || strings.Contains(out.String(), shopSecret) {
		t.Errorf("keys list printed:\n%s\nwant a header, then the shop's key and the CI's, and no secret", out.String())
	}

	out.Reset()
	if err := run(ctx, []string{"keys", "revoke", shop.Prefix}, env, &out, &errOut); err != nil || !strings.Contains(out.String(), "revoked live API key "+shop.Prefix) {
		t.Fatalf("keys revoke %s: %v, printed %q", shop.Prefix, err, out.String())
	}
	if _, err := keys.Authenticate(ctx, shopSecret); !errors.Is(err, apikey.ErrInvalid) {
		t.Errorf("the revoked key authenticates: %v", err)
	}
	if err := run(ctx, []string{"keys", "revoke", ci.ID.String()}, env, &out, &errOut); err != nil {
		t.Errorf("keys revoke by id: %v", err)
	}
	for _, args := range [][]string{{"keys", "revoke", "sekali_key_nope"}, {"keys", "revoke", uuid.NewString()}, {"keys", "revoke"}} {
		if err := run(ctx, args, env, &out, &errOut); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	out.Reset()
	if err := run(ctx, []string{"keys", "list"}, env, &out, &errOut); err != nil || strings.Count(out.String(), "Z\n") != 2 {
		t.Errorf("keys list after the revokes: %v\n%s\nwant both with the time they were revoked", err, out.String())
	}
	actions, err := notify.NewOperator(db.Pool, nil, nil, nil).Actions(ctx, 0, 10)
	if err != nil || len(actions) < 2 || actions[1].Action != "api_key.revoke" || actions[1].Target != "api_key:"+shop.Prefix ||
		!strings.HasPrefix(actions[1].Actor, "cli:") {
		t.Errorf("the revoke is recorded as %+v (%v), want api_key.revoke on api_key:%s by cli:<user>@<host>", actions, err, shop.Prefix)
	}
}
