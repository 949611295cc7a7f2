package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/httpapi"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/quota"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// seriesOf counts the series of one metric family.
func seriesOf(t *testing.T, s stack, name string) int {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// Nothing a client sends can grow the metrics: made-up methods become
// "other" and unknown paths "unmatched", so after the first of each kind
// the number of series stays the same however many follow. The log line
// carries the same bounded method.
func TestMetricsLabelsAreAClosedSet(t *testing.T) {
	t.Parallel()
	s := setup(t)
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		b := make([]byte, n)
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		return string(b)
	}
	send := func(n int) {
		for range n {
			method := word(1 + rng.IntN(2000))
			res, err := s.send(method, "/"+strings.ToLower(word(1+rng.IntN(50))), "", nil, map[string]string{"Authorization": ""})
			if err != nil {
				t.Fatal(err)
			}
			if res.status != http.StatusNotFound && res.status != http.StatusMethodNotAllowed {
				t.Fatalf("%.20s… = %d", method, res.status)
			}
		}
	}
	send(20)
	before := seriesOf(t, s, "sekali_http_request_duration_seconds")
	send(300)
	if after := seriesOf(t, s, "sekali_http_request_duration_seconds"); after != before || before == 0 {
		t.Errorf("series grew from %d to %d with random methods and paths", before, after)
	}
	for _, line := range strings.Split(s.logs.String(), "\n") {
		if len(line) > 2000 {
			t.Fatalf("a log line of %d bytes: the attacker's method reached it", len(line))
		}
	}
	if !strings.Contains(s.logs.String(), `"method":"other"`) {
		t.Error(`no log line says "method":"other"`)
	}
}

// A client over its budget gets 429 with Retry-After; another client, or
// the same one later, is not affected. Public endpoints (the checkout
// too, in public mode, without a key) count per client address, backend
// ones per API key.
func TestRateLimitsAnswer429WithRetryAfter(t *testing.T) {
	t.Parallel()
	s := setup(t, setupOpts{rateLimits: httpapi.RateLimits{
		Public:  httpapi.RateLimit{PerSecond: 0.001, Burst: 3},
		Backend: httpapi.RateLimit{PerSecond: 0.001, Burst: 2},
	}, public: &order.PublicRules{}})
	c := newContract(t, s)
	anonymous := map[string]string{"Authorization": ""}
	for range 3 {
		c.do(201, "POST", "/v1/orders", "application/json", validCheckout, map[string]string{"Authorization": "", "Idempotency-Key": uuid.NewString()})
	}
	res := c.do(429, "POST", "/v1/orders", "application/json", validCheckout, anonymous)
	if ra, err := strconv.Atoi(res.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q", res.header.Get("Retry-After"))
	}
	c.do(429, "GET", "/v1/templates", "", "", nil) // the same address, another public endpoint
	// The shop's server at the same address checks out with its key's budget.
	c.do(201, "POST", "/v1/orders", "application/json", validCheckout, nil)

	// The backend's budget is its key's, not the address's.
	var o struct {
		ID string `json:"id"`
	}
	if res := s.do(t, "GET", "/healthz", "", nil, nil); res.status != 200 {
		t.Errorf("health checks are limited too: %d", res.status)
	}
	if err := s.db.Pool.QueryRow(t.Context(), "SELECT id::text FROM orders LIMIT 1").Scan(&o.ID); err != nil {
		t.Fatal(err)
	}
	path := "/v1/orders/" + o.ID
	c.do(200, "GET", path, "", "", nil) // the key's second token: its checkout took the first
	c.do(429, "GET", path, "", "", nil)
	_, other, err := s.keys.Create(t.Context(), "test", "another backend", []apikey.Scope{apikey.ScopeOrdersRead})
	if err != nil {
		t.Fatal(err)
	}
	c.do(200, "GET", path, "", "", map[string]string{"Authorization": "Bearer " + other})
	if n := s.count(t, "orders"); n != 4 {
		t.Errorf("%d orders, want the 4 let through", n)
	}
}

// Requests to the backend's routes whose credentials fail — no key, a
// wrong key, a guessed order token — spend a budget per client address
// (the public one), so guessing is bounded, each guess being a database
// look-up. Past it the answer is 429 with Retry-After before any look-up,
// so even a good key from that address waits; requests with good
// credentials spend nothing of it, and other addresses are not affected.
func TestFailedCredentialsAreRateLimitedPerAddress(t *testing.T) {
	t.Parallel()
	s := setup(t, setupOpts{rateLimits: httpapi.RateLimits{
		Public:         httpapi.RateLimit{PerSecond: 0.001, Burst: 3},
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
	}})
	c := newContract(t, s)
	var o order.Order
	s.postOrder(t, validCheckout, map[string]string{"X-Forwarded-For": "198.51.100.1"}).decode(t, &o)
	orderPath := "/v1/orders/" + o.ID.String()
	from := func(addr, authorization string) map[string]string {
		return map[string]string{"X-Forwarded-For": addr, "Authorization": authorization}
	}
	const guesser, other = "203.0.113.7", "203.0.113.8"
	good := "Bearer " + s.backendKey
	shipment := `{"carrier": "JNE", "tracking_number": "JNE-1"}`

	// Good credentials spend nothing of the refusal budget.
	for range 5 {
		c.do(200, "GET", orderPath, "", "", from(guesser, good))
	}
	c.do(200, "GET", orderPath, "", "", from(guesser, "Bearer "+o.AccessToken))
	// Three refusals, one of each kind, use up the burst of 3 ...
	c.do(401, "GET", orderPath, "", "", from(guesser, "Bearer sekali_key_nope_nope"))
	c.do(401, "POST", orderPath+"/shipments", "application/json", shipment, from(guesser, ""))
	c.do(404, "GET", orderPath, "", "", from(guesser, "Bearer "+order.AccessTokenPrefix+"a-guessed-token"))
	// ... and the next is 429, whatever its credentials, on every backend route.
	for _, req := range []struct{ method, path, body, authorization string }{
		{"GET", orderPath, "", "Bearer sekali_key_nope_nope"},
		{"POST", orderPath + "/notifications", `{}`, "Bearer sekali_key_still_wrong"},
		{"GET", orderPath, "", "Bearer " + order.AccessTokenPrefix + "another-guess"},
		{"POST", orderPath + "/shipments", shipment, good},
	} {
		ct := ""
		if req.body != "" {
			ct = "application/json"
		}
		res := c.do(429, req.method, req.path, ct, req.body, from(guesser, req.authorization))
		if ra, err := strconv.Atoi(res.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("%s %s: Retry-After %q", req.method, req.path, res.header.Get("Retry-After"))
		}
	}
	// Another address, and the public endpoints of the same one, are not affected.
	c.do(200, "GET", orderPath, "", "", from(other, good))
	c.do(401, "GET", orderPath, "", "", from(other, "Bearer sekali_key_nope_nope"))
	c.do(200, "GET", "/v1/templates", "", "", from(guesser, ""))
	if n := s.count(t, "notification_deliveries"); n != 1 {
		t.Errorf("%d deliveries, want the confirmation only", n)
	}
}

// Past HTTP_MAX_IN_FLIGHT requests at once, the next is refused at once
// with 503 and Retry-After, writes nothing, and health checks still
// answer; the admitted one completes.
func TestOverloadIsShedNotQueued(t *testing.T) {
	t.Parallel()
	s := setup(t, setupOpts{maxInFlight: 1})
	ctx := context.Background()
	tx, err := s.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	first := make(chan response, 1)
	go func() {
		res, err := s.send(http.MethodPost, "/v1/orders", "application/json", strings.NewReader(validCheckout), nil)
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	testenv.WaitFor(t, "the first checkout to wait on the table lock", 10*time.Second, func() bool {
		var n int
		_ = s.db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE relation = 'orders'::regclass AND NOT granted").Scan(&n)
		return n > 0
	})
	res := s.postOrder(t, strings.Replace(validCheckout, "Ana Maria", "Budi", 1), nil)
	if res.status != http.StatusServiceUnavailable || res.header.Get("Retry-After") == "" || !strings.Contains(string(res.body), "urn:sekali:problem:overloaded") {
		t.Errorf("over the bound: %d %q %s", res.status, res.header.Get("Retry-After"), res.body)
	}
	if res := s.do(t, http.MethodGet, "/healthz", "", nil, nil); res.status != http.StatusOK {
		t.Errorf("/healthz while overloaded: %d", res.status)
	}
	// A load balancer's readiness probe sees the overload.
	if res := s.do(t, http.MethodGet, "/readyz", "", nil, nil); res.status != http.StatusServiceUnavailable || !strings.Contains(string(res.body), `"api":"overloaded`) {
		t.Errorf("/readyz while overloaded: %d %s", res.status, res.body)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-first; got.status != http.StatusCreated {
		t.Errorf("the admitted checkout: %d %s", got.status, got.body)
	}
	if n := s.count(t, "orders"); n != 1 {
		t.Errorf("%d orders, want only the admitted one", n)
	}
}

// A 401's challenge follows RFC 6750 §3.1, on the admin API and on the
// backend's routes alike: error="invalid_token" when a bearer token was
// sent and is not valid, and no error code when the request carried no
// bearer token at all (no Authorization, or another scheme).
func TestUnauthorizedChallengeNamesAnInvalidToken(t *testing.T) {
	t.Parallel()
	s := setup(t)
	orderPath := "/v1/orders/0190c5a0-0000-7000-8000-000000000000"
	for _, tc := range []struct {
		name, method, path, authorization, want string
	}{
		{"admin, none", http.MethodGet, "/admin/v1/queue", "", `Bearer realm="sekali-admin"`},
		{"admin, another scheme", http.MethodGet, "/admin/v1/queue", "Basic " + adminToken, `Bearer realm="sekali-admin"`},
		{"admin, a wrong token", http.MethodGet, "/admin/v1/queue", "Bearer not-the-admin-token", `Bearer realm="sekali-admin", error="invalid_token"`},
		{"admin, an API key", http.MethodGet, "/admin/v1/queue", "Bearer " + s.backendKey, `Bearer realm="sekali-admin", error="invalid_token"`},
		{"key, none", http.MethodGet, orderPath, "", `Bearer realm="sekali"`},
		{"key, another scheme", http.MethodGet, orderPath, "Basic " + s.backendKey, `Bearer realm="sekali"`},
		{"key, a wrong key", http.MethodGet, orderPath, "Bearer sekali_key_nope_nope", `Bearer realm="sekali", error="invalid_token"`},
		{"key, the admin token", http.MethodPost, orderPath + "/shipments", "Bearer " + adminToken, `Bearer realm="sekali", error="invalid_token"`},
	} {
		res := s.do(t, tc.method, tc.path, "", nil, map[string]string{"Authorization": tc.authorization})
		if got := res.header.Get("WWW-Authenticate"); res.status != http.StatusUnauthorized || got != tc.want {
			t.Errorf("%s: %d %q, want 401 %q", tc.name, res.status, got, tc.want)
		}
	}
}

// A bearer token that does not open a route is answered alike whatever
// it is, so the answers tell nothing about which keys exist: an unknown
// prefix, a wrong secret of a live key's prefix and a revoked key, and on
// the admin API also a live key without the admin scope and a wrong
// ADMIN_TOKEN, get the same status, challenge and body.
func TestRefusedTokensAreAnsweredAlike(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	op, opKey, err := s.keys.Create(ctx, "test", "Ana", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	_, oldKey, err := s.keys.Create(ctx, "test", "old backend", apikey.BackendScopes)
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.keys.Authenticate(ctx, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.keys.Revoke(ctx, "test", old.ID); err != nil {
		t.Fatal(err)
	}
	// A key is its prefix, "_" and its secret; the prefix's own part is
	// 16 characters.
	wrongSecret := func(key string) string {
		n := len(apikey.Prefix) + 16 + 1
		return key[:n] + strings.Repeat("A", len(key)-n)
	}
	unknown := apikey.Prefix + "aaaaaaaaaaaaaaaa" + opKey[len(op.Prefix):]
	answer := func(path, token string) string {
		res := s.do(t, http.MethodGet, path, "", nil, map[string]string{"Authorization": "Bearer " + token})
		var p map[string]any
		res.decode(t, &p)
		delete(p, "request_id")
		return fmt.Sprintf("%d %q %v", res.status, res.header.Get("WWW-Authenticate"), p)
	}
	for path, tokens := range map[string]map[string]string{
		"/admin/v1/queue": {
			"a wrong secret":                wrongSecret(opKey),
			"a revoked key":                 oldKey,
			"a key without the admin scope": s.backendKey,
			"a wrong ADMIN_TOKEN":           adminToken + "x",
		},
		"/v1/orders/0190c5a0-0000-7000-8000-000000000000": {
			"a wrong secret": wrongSecret(s.backendKey),
			"a revoked key":  oldKey,
		},
	} {
		want := answer(path, unknown)
		if !strings.HasPrefix(want, "401 ") {
			t.Fatalf("%s, an unknown prefix: %s", path, want)
		}
		for name, token := range tokens {
			if got := answer(path, token); got != want {
				t.Errorf("%s, %s:\n%s\nwant what an unknown prefix gets:\n%s", path, name, got, want)
			}
		}
	}
}

// Clients that send their bodies a byte a second hold connections, not
// the places of HTTP_MAX_IN_FLIGHT: while 150 of them trickle from one
// address, everyone else is served, and each slow one is answered 408
// once its body is late.
func TestSlowBodiesDoNotLockOthersOut(t *testing.T) {
	t.Parallel()
	const timeout = 3 * time.Second
	s := setup(t, setupOpts{maxInFlight: 4, bodyTimeout: timeout})
	host := strings.TrimPrefix(s.url, "http://")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	answers := make(chan string, 150)
	for range 150 {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := fmt.Fprintf(conn, "POST /v1/orders HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", host, s.backendKey); err != nil {
			t.Fatal(err)
		}
		go func() { // a byte a second until the server answers
			for ctx.Err() == nil {
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}()
		go func() {
			line, _ := bufio.NewReader(conn).ReadString('\n')
			answers <- line
		}()
	}
	time.Sleep(500 * time.Millisecond) // every slow body has started; none has a second byte yet
	for i := range 10 {
		for _, res := range []response{
			s.postOrder(t, strings.Replace(validCheckout, "Ana Maria", fmt.Sprintf("Budi %d", i), 1), nil),
			s.do(t, http.MethodGet, "/v1/templates", "", nil, nil),
			s.do(t, http.MethodGet, "/admin/v1/queue", "", nil, map[string]string{"Authorization": "Bearer " + adminToken}),
		} {
			if res.status >= 300 {
				t.Fatalf("while 150 bodies trickle in: %d %s", res.status, res.body)
			}
		}
	}
	if res := s.do(t, http.MethodGet, "/readyz", "", nil, nil); res.status != http.StatusOK {
		t.Errorf("/readyz while slow bodies trickle in: %d %s", res.status, res.body)
	}
	deadline := time.After(timeout + 10*time.Second)
	for i := range 150 {
		select {
		case line := <-answers:
			if !strings.HasPrefix(line, "HTTP/1.1 408 ") {
				t.Fatalf("slow body %d was answered %q, want 408", i, line)
			}
		case <-deadline:
			t.Fatalf("%d slow bodies still unanswered %s after the body timeout", 150-i, 10*time.Second)
		}
	}
	if n := s.count(t, "orders"); n != 10 {
		t.Errorf("%d orders, want the 10 whole ones", n)
	}
}

// A body declared larger than its route takes is refused 413 before a
// byte of it is read: a client that asks first (Expect: 100-continue,
// as curl does past 1 MB) is told at once, and is never told to go on
// only to be cut off mid-upload. A body within the limit still gets its
// 100 Continue.
func TestAnOversizedBodyIsRefusedBeforeContinue(t *testing.T) {
	t.Parallel()
	s := bare(t, nil)
	host := strings.TrimPrefix(s.url, "http://")
	ask := func(path string, length int) (first string, rest *bufio.Reader) {
		t.Helper()
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
			"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n", path, host, length); err != nil {
			t.Fatal(err)
		}
		rest = bufio.NewReader(conn)
		first, err = rest.ReadString('\n')
		if err != nil {
			t.Fatalf("%s, %d bytes: no answer: %v", path, length, err)
		}
		return first, rest
	}
	for _, tt := range []struct {
		path   string
		length int
	}{
		{"/v1/orders", 2 << 20},
		{"/v1/orders", 64<<10 + 1},
		{"/v1/orders/0/notifications", 2 << 20},
		{"/v1/webhooks/resend", 2 << 20},
	} {
		first, rest := ask(tt.path, tt.length)
		if !strings.HasPrefix(first, "HTTP/1.1 413 ") {
			t.Errorf("%s, %d bytes declared: the first line is %q, want 413", tt.path, tt.length, first)
			continue
		}
		res, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader(first), rest)), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "body-too-large") || !res.Close {
			t.Errorf("%s: %v %q close=%v", tt.path, res.Header, body, res.Close)
		}
	}
	if first, _ := ask("/v1/orders", 100); !strings.HasPrefix(first, "HTTP/1.1 100 ") {
		t.Errorf("a body within the limit: the first line is %q, want 100 Continue", first)
	}
}

// Each API key's Idempotency-Keys are its own: another backend sending
// the same key and body gets an order of its own, never the first
// one's response with its access token.
func TestIdempotencyKeysBelongToTheirAPIKey(t *testing.T) {
	t.Parallel()
	s := setup(t)
	_, other, err := s.keys.Create(t.Context(), "test", "another shop server", []apikey.Scope{apikey.ScopeCheckout})
	if err != nil {
		t.Fatal(err)
	}
	var first, second, again order.Order
	s.postOrder(t, validCheckout, map[string]string{"Idempotency-Key": "shared-key"}).decode(t, &first)
	res := s.postOrder(t, validCheckout, map[string]string{"Idempotency-Key": "shared-key", "Authorization": "Bearer " + other})
	res.decode(t, &second)
	if res.status != http.StatusCreated || res.header.Get("Idempotent-Replayed") != "" || second.ID == first.ID || second.AccessToken == first.AccessToken {
		t.Errorf("another key's replay: %d replayed=%q, order %s (the first was %s)", res.status, res.header.Get("Idempotent-Replayed"), second.ID, first.ID)
	}
	res = s.postOrder(t, validCheckout, map[string]string{"Idempotency-Key": "shared-key"})
	res.decode(t, &again)
	if res.header.Get("Idempotent-Replayed") != "true" || again.ID != first.ID {
		t.Errorf("the same key's replay: %q, order %s, want %s", res.header.Get("Idempotent-Replayed"), again.ID, first.ID)
	}
}

// In public mode a storefront's browser checks out without a key, held to
// the public rules: no links in what the e-mail shows, no free orders, an
// Idempotency-Key nobody can guess, and the hourly caps. The shop's
// server, with its key, is held to none of them.
func TestPublicCheckoutRules(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	rdb := redisconn.NewClient(rd.Opt)
	t.Cleanup(func() { rdb.Close() })
	caps := quota.NewHourly(rdb, quota.Limits{PerRecipient: 2}, rd.Queue, prometheus.NewRegistry())
	s := setup(t, setupOpts{public: &order.PublicRules{Quota: caps}})
	anonymous := func(header map[string]string) map[string]string {
		h := map[string]string{"Authorization": ""}
		maps.Copy(h, header)
		return h
	}
	with := func(old, replacement string) string { return strings.Replace(validCheckout, old, replacement, 1) }
	for _, tt := range []struct {
		name    string
		body    string
		header  map[string]string
		status  int
		pointer string // the field a 422 names, or what a 400 says
	}{
		{"a link in the name", with(`"Ana Maria"`, `"WIN A PRIZE: visit http://evil.test/claim now"`), nil, 422, "/customer_name"},
		{"a bare domain in an item", with(`"Cangkir"`, `"Cangkir, more at toko-murah.co.id"`), nil, 422, "/items/1/name"},
		{"a domain with an ideographic dot", with(`"Ana Maria"`, `"Ana, claim at evil。com"`), nil, 422, "/customer_name"},
		{"a defanged domain in an item", with(`"Cangkir"`, `"Cangkir evil[.]com"`), nil, 422, "/items/1/name"},
		{"a free item in a paid order", with(`"unit_price": 12500050`, `"unit_price": 0`), nil, 201, ""},
		{"an order of free items", with(`"unit_price": 4500000`, `"unit_price": 0`), nil, 0, ""},
		{"a guessable Idempotency-Key", validCheckout, map[string]string{"Idempotency-Key": "order-12"}, 400, "random UUID"},
		{"a version 1 UUID", validCheckout, map[string]string{"Idempotency-Key": "6ba7b810-9dad-11d1-80b4-00c04fd430c8"}, 400, "random UUID"},
		{"a random UUID", validCheckout, map[string]string{"Idempotency-Key": uuid.NewString()}, 201, ""},
		{"the recipient's third this hour", validCheckout, nil, 429, ""},
	} {
		if tt.status == 0 { // both lines free: a total of 0
			tt.body = strings.Replace(tt.body, `"unit_price": 12500050`, `"unit_price": 0`, 1)
			tt.status, tt.pointer = 422, "/items"
		}
		res := s.postOrder(t, tt.body, anonymous(tt.header))
		if res.status != tt.status || !strings.Contains(string(res.body), tt.pointer) {
			t.Errorf("%s: %d %s, want %d naming %q", tt.name, res.status, res.body, tt.status, tt.pointer)
		}
		if tt.status == 429 && res.header.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", tt.name)
		}
	}
	// The shop's server is held to none of it.
	if res := s.postOrder(t, with(`"Ana Maria"`, `"Ana (www.ana.example)"`), nil); res.status != http.StatusCreated {
		t.Errorf("a keyed checkout past the cap, with a link: %d %s", res.status, res.body)
	}
	if n := s.count(t, "orders"); n != 3 {
		t.Errorf("%d orders, want the 3 let through", n)
	}
}

// An attacker with many addresses who floods the public checkout with
// fresh recipients at fresh domains, each address within its cap per
// client, gets PUBLIC_CHECKOUT_PER_HOUR confirmations mailed in the hour,
// and then none: the cap in all is what bounds the e-mails strangers can
// make the shop send however many addresses they have.
func TestPublicCheckoutFloodIsCapped(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	rdb := redisconn.NewClient(rd.Opt)
	t.Cleanup(func() { rdb.Close() })
	reg := prometheus.NewRegistry()
	caps := quota.NewHourly(rdb, quota.Limits{PerClient: 5, PerRecipient: 5, PerDomain: 300, All: 50}, rd.Queue, reg)
	s := setup(t, setupOpts{public: &order.PublicRules{Quota: caps}, rateLimits: behindProxy})
	accepted := 0
	for i := range 120 {
		body := strings.Replace(validCheckout, "Ana.Maria@Example.COM", fmt.Sprintf("victim%d@domain%d.example", i, i), 1)
		from := fmt.Sprintf("203.0.113.%d", i/4) // 30 addresses, 4 strangers each
		res := s.postOrder(t, body, map[string]string{"Authorization": "", "X-Forwarded-For": from})
		switch {
		case res.status == http.StatusCreated:
			accepted++
		case res.status == http.StatusTooManyRequests && strings.Contains(string(res.body), "as many order confirmations this hour as this shop allows"):
		default:
			t.Fatalf("checkout %d: %d %s", i, res.status, res.body)
		}
	}
	if accepted != 50 {
		t.Errorf("%d of 120 flooding checkouts accepted, want the 50 of the cap", accepted)
	}
	if n := s.count(t, "notification_deliveries"); n != 50 {
		t.Errorf("%d confirmations recorded, want 50", n)
	}
	if got := testenv.Metric(t, reg, "sekali_public_checkouts_total", "result", "all"); got != 70 {
		t.Errorf("refusals by the cap in all = %v, want 70 (what SekaliCheckoutFlood watches)", got)
	}
}

// behindProxy is the API behind a load balancer at 127.0.0.1, which
// names the client in X-Forwarded-For, and without rate limits.
var behindProxy = httpapi.RateLimits{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// One client address cannot spend the cap in all, with the caps at their
// defaults: flooding 3,000 checkouts to fresh addresses over 40 domains,
// with a name that passes the link rules, it has 5 strangers mailed, and
// a shopper at another address then checks out. Rotating addresses
// within one IPv6 /64 is one client. (Without the cap per client the
// flood took the hour's 3,000 in under a minute, and the shopper got 429
// until the hour turned.)
func TestOneClientCannotSpendTheCapInAll(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	rdb := redisconn.NewClient(rd.Opt)
	t.Cleanup(func() { rdb.Close() })
	reg := prometheus.NewRegistry()
	caps := quota.NewHourly(rdb, quota.Limits{PerClient: 5, PerRecipient: 5, PerDomain: 300, All: 3000, NetworkShare: 10, Reserve: 20}, rd.Queue, reg)
	s := setup(t, setupOpts{public: &order.PublicRules{Quota: caps}, rateLimits: behindProxy})
	sink := s.startWorker(t, nil)
	spam := strings.Replace(validCheckout, `"Ana Maria"`, `"You won a prize call 0800 123 now"`, 1)
	flood := func(wave string, n int, from func(i int) string) (admitted int) {
		t.Helper()
		for i := range n {
			body := strings.Replace(spam, "Ana.Maria@Example.COM", fmt.Sprintf("stranger-%s-%d@domain%d.example", wave, i, i%40), 1)
			res := s.postOrder(t, body, map[string]string{"Authorization": "", "X-Forwarded-For": from(i)})
			switch {
			case res.status == http.StatusCreated:
				admitted++
			case res.status == http.StatusTooManyRequests && strings.Contains(string(res.body), "client address"):
			default:
				t.Fatalf("flooding checkout %d from %s: %d %s", i, from(i), res.status, res.body)
			}
		}
		return admitted
	}
	start := time.Now()
	if n := flood("v4", 3000, func(int) string { return "203.0.113.7" }); n != 5 {
		t.Errorf("one address had %d of 3,000 checkouts to strangers admitted, want 5", n)
	}
	t.Logf("3,000 checkouts from one address: %s", time.Since(start).Round(time.Millisecond))
	res := s.postOrder(t, validCheckout, map[string]string{"Authorization": "", "X-Forwarded-For": "198.51.100.20", "Idempotency-Key": uuid.NewString()})
	if res.status != http.StatusCreated {
		t.Errorf("a shopper at another address after the flood: %d %s, want 201", res.status, res.body)
	}
	if n := flood("v6", 200, func(i int) string { return fmt.Sprintf("2001:db8:7:7::%x", i+1) }); n != 5 {
		t.Errorf("200 addresses of one IPv6 /64 had %d checkouts to strangers admitted, want 5", n)
	}
	if got := testenv.Metric(t, reg, "sekali_public_checkouts_total", "result", "client"); got != 3190 {
		t.Errorf("refusals by the cap per client = %v, want 3,190", got)
	}
	if got := testenv.Metric(t, reg, "sekali_public_checkouts_total", "result", "all"); got != 0 {
		t.Errorf("refusals by the cap in all = %v, want none: the flood never reached it", got)
	}
	unsent := func() int {
		var n int
		if err := s.db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM notification_deliveries WHERE status <> 'sent'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.WaitFor(t, "the admitted confirmations to be mailed", 30*time.Second, func() bool { return unsent() == 0 })
	strangers := 0
	for _, m := range sink.Messages() {
		if strings.Contains(strings.Join(m.To, ","), "stranger") {
			strangers++
		}
	}
	if n, recorded := sink.Count(), s.count(t, "notification_deliveries"); n != 11 || strangers != 10 || recorded != 11 {
		t.Errorf("%d e-mails mailed (%d to strangers) of %d recorded; want 11: 5 from each flooder, 1 to the shopper", n, strangers, recorded)
	}
}

// A crowd of client addresses cannot spend a domain's hour, with the
// caps at their defaults. 70 clients, each its own IPv6 /64 but all of
// one /48, check out 5 fresh @gmail.com recipients each: the /48 has
// its share of gmail.com's 300, 30, and a shopper from another address
// then checks out. Then a crowd of 70 networks, a /48 each, does the
// same: they spend the part of the cap open to every network (240), and
// past it a network not seen this hour still has its first, so a
// shopper from yet another network checks out too. (Before, the first
// crowd had 300 admitted and every gmail.com shopper got 429 until the
// hour turned.)
func TestACrowdCannotSpendADomainsHour(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	rdb := redisconn.NewClient(rd.Opt)
	t.Cleanup(func() { rdb.Close() })
	reg := prometheus.NewRegistry()
	caps := quota.NewHourly(rdb, quota.Limits{PerClient: 5, PerRecipient: 5, PerDomain: 300, All: 3000, NetworkShare: 10, Reserve: 20}, rd.Queue, reg)
	s := setup(t, setupOpts{public: &order.PublicRules{Quota: caps}, rateLimits: behindProxy})
	n := 0
	checkout := func(from string) response {
		t.Helper()
		n++
		body := strings.Replace(validCheckout, "Ana.Maria@Example.COM", fmt.Sprintf("fresh%d@gmail.com", n), 1)
		return s.postOrder(t, body, map[string]string{"Authorization": "", "X-Forwarded-For": from})
	}
	crowd := func(from func(c int) string) (admitted int) {
		t.Helper()
		for c := range 70 {
			for range 5 {
				switch res := checkout(from(c)); res.status {
				case http.StatusCreated:
					admitted++
				case http.StatusTooManyRequests:
				default:
					t.Fatalf("a checkout of the crowd from %s: %d %s", from(c), res.status, res.body)
				}
			}
		}
		return admitted
	}
	shopper := func(from string) {
		t.Helper()
		if res := checkout(from); res.status != http.StatusCreated {
			t.Errorf("a shopper from %s after the crowd: %d %s, want 201", from, res.status, res.body)
		}
	}

	start := time.Now()
	if got := crowd(func(c int) string { return fmt.Sprintf("2001:db8:99:%x::1", c) }); got != 30 {
		t.Errorf("70 /64s of one /48 had %d of 350 checkouts to gmail.com admitted, want the /48's share, 30", got)
	}
	t.Logf("the crowd of one /48: %s", time.Since(start).Round(time.Millisecond))
	shopper("198.51.100.20")
	if got := testenv.Metric(t, reg, "sekali_public_checkouts_total", "result", "network"); got != 320 {
		t.Errorf("refusals by a network's share = %v, want 320", got)
	}

	// 41 networks have their 5 (236), the 42nd 4 (240: the open part is
	// spent), and the other 28 their first each, from the part kept.
	if got := crowd(func(c int) string { return fmt.Sprintf("2001:db8:%x::1", 0x100+c) }); got != 237 {
		t.Errorf("70 networks had %d of 350 checkouts to gmail.com admitted, want 237", got)
	}
	shopper("192.0.2.33")
	if got := s.count(t, "orders"); got != 269 {
		t.Errorf("%d orders to gmail.com, want 269 of its 300", got)
	}
}

// When the API cannot reach Redis to count an anonymous checkout, it
// refuses it: 503 with Retry-After, nothing written, counted unavailable,
// the cause in the request's log line. Admitted uncounted, it would be
// mailed past every cap once the worker reaches Redis. A keyed checkout
// is counted by nobody and goes on.
func TestPublicCheckoutIsRefusedWhenItsQuotaCannotBeCounted(t *testing.T) {
	t.Parallel()
	down, err := redisconn.Parse("redis://" + testenv.RefusedAddr(t) + "/0")
	if err != nil {
		t.Fatal(err)
	}
	rdb := redisconn.NewClient(down)
	t.Cleanup(func() { rdb.Close() })
	reg := prometheus.NewRegistry()
	caps := quota.NewHourly(rdb, quota.Limits{PerClient: 5, PerRecipient: 5, PerDomain: 300, All: 3000}, "down", reg)
	s := setup(t, setupOpts{public: &order.PublicRules{Quota: caps}})
	c := newContract(t, s)
	for range 3 {
		res := c.do(503, "POST", "/v1/orders", "application/json", validCheckout, map[string]string{"Authorization": "", "Idempotency-Key": uuid.NewString()})
		if res.header.Get("Retry-After") != "5" || !strings.Contains(string(res.body), "urn:sekali:problem:quota-unavailable") {
			t.Errorf("refused: Retry-After %q, %s", res.header.Get("Retry-After"), res.body)
		}
	}
	if n := s.count(t, "orders"); n != 0 {
		t.Errorf("%d orders written without a quota, want none", n)
	}
	if got := testenv.Metric(t, reg, "sekali_public_checkouts_total", "result", "unavailable"); got != 3 {
		t.Errorf("unavailable = %v, want 3", got)
	}
	if cause, _ := s.logs.Field("http request", "error"); !strings.Contains(cause, "quota cannot be counted") || !strings.Contains(cause, "connection refused") {
		t.Errorf("the request's log line says %q, want the cause", cause)
	}
	c.do(201, "POST", "/v1/orders", "application/json", validCheckout, nil) // the shop's server, with its key
	if n := s.count(t, "orders"); n != 1 {
		t.Errorf("%d orders, want the keyed one", n)
	}
}
