package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

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
