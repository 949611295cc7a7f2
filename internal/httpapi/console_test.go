package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/httpapi"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
)

// browser is a client with a cookie jar that does not follow redirects,
// as the console tests look at each answer.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (b *browser) do(method, path string, form url.Values, header ...string) (int, http.Header, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(raw)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *browser) csrf(page string) string {
	b.t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		b.t.Fatalf("no CSRF token on the page:\n%s", page)
	}
	return m[1]
}

// operator makes an operator key named name and signs in with it.
func (s stack) operator(t *testing.T, name string) (*browser, apikey.Key) {
	t.Helper()
	k, token, err := s.keys.Create(context.Background(), "test", name, []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, s.url)
	status, h, body := b.do(http.MethodPost, "/admin/sign-in", url.Values{"key": {token}})
	if status != http.StatusSeeOther || h.Get("Location") != "/admin/" {
		t.Fatalf("sign-in = %d %s\n%s", status, h.Get("Location"), body)
	}
	return b, k
}

// Signing in: the cookie is HttpOnly, SameSite=Strict and for /admin/
// only; every page has the strict policy; without a session a page sends
// the browser to sign in; a backend key or a wrong one is refused.
func TestConsoleSignIn(t *testing.T) {
	t.Parallel()
	s := setup(t)
	anon := newBrowser(t, s.url)
	if status, h, _ := anon.do(http.MethodGet, "/admin/deliveries", nil); status != http.StatusSeeOther || h.Get("Location") != "/admin/sign-in" {
		t.Errorf("a page without a session = %d to %q, want 303 to the sign-in", status, h.Get("Location"))
	}
	_, backend, err := s.keys.Create(context.Background(), "test", "shop", []apikey.Scope{apikey.ScopeOrdersWrite})
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]string{"backend key": backend, "wrong key": backend + "x", "empty": ""} {
		status, h, body := anon.do(http.MethodPost, "/admin/sign-in", url.Values{"key": {key}})
		if status != http.StatusUnauthorized || h.Get("Set-Cookie") != "" || !strings.Contains(body, "not an operator key") {
			t.Errorf("%s: %d, cookie %q", name, status, h.Get("Set-Cookie"))
		}
	}

	k, token, err := s.keys.Create(context.Background(), "test", "Ana <on call>", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, s.url)
	status, h, _ := b.do(http.MethodPost, "/admin/sign-in", url.Values{"key": {token}})
	cookie := h.Get("Set-Cookie")
	if status != http.StatusSeeOther {
		t.Fatalf("sign-in = %d", status)
	}
	for _, want := range []string{"sekali_console=", "Path=/admin/", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(cookie, want) {
			t.Errorf("cookie %q lacks %s", cookie, want)
		}
	}
	if strings.Contains(cookie, "Secure") {
		t.Errorf("cookie %q is Secure over plain HTTP (the browser would drop it)", cookie)
	}
	status, h, body := b.do(http.MethodGet, "/admin/", nil)
	if status != http.StatusOK || !strings.Contains(body, "Ana &lt;on call&gt;") || strings.Contains(body, "<on call>") {
		t.Errorf("overview = %d, operator name not shown escaped:\n%s", status, body)
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script") || strings.Contains(csp, "unsafe") {
		t.Errorf("policy %q", csp)
	}

	// Over TLS (at the load balancer) the cookie is Secure.
	tls := newBrowser(t, s.url)
	_, h, _ = tls.do(http.MethodPost, "/admin/sign-in", url.Values{"key": {token}}, "X-Forwarded-Proto", "https")
	if !strings.Contains(h.Get("Set-Cookie"), "Secure") {
		t.Errorf("behind TLS the cookie %q is not Secure", h.Get("Set-Cookie"))
	}

	// Signing out ends the session; revoking the key ends the others.
	status, _, _ = b.do(http.MethodPost, "/admin/sign-out", url.Values{"csrf": {b.csrf(body)}})
	if status != http.StatusSeeOther {
		t.Errorf("sign-out = %d", status)
	}
	if status, _, _ := b.do(http.MethodGet, "/admin/", nil); status != http.StatusSeeOther {
		t.Errorf("after sign-out the overview = %d, want 303", status)
	}
	other := newBrowser(t, s.url)
	other.do(http.MethodPost, "/admin/sign-in", url.Values{"key": {token}})
	if _, err := s.keys.Revoke(context.Background(), "test", k.ID); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := other.do(http.MethodGet, "/admin/", nil); status != http.StatusSeeOther {
		t.Errorf("after the key's revocation the overview = %d, want 303", status)
	}
}

// Failed sign-ins from one address stop at the limit, before any look-up.
func TestConsoleSignInIsRateLimited(t *testing.T) {
	t.Parallel()
	s := setup(t)
	b := newBrowser(t, s.url)
	var last int
	for range 11 {
		last, _, _ = b.do(http.MethodPost, "/admin/sign-in", url.Values{"key": {"sekali_key_guess_guess"}})
	}
	if last != http.StatusTooManyRequests {
		t.Errorf("the 11th failed sign-in = %d, want 429", last)
	}
}

// A stranger's failed guesses cost the stranger, never the operators.
// Ten bad tokens from an address, of every kind, leave an operator's
// key working from it, on the admin API and at the console's sign-in,
// and a session too; but guessing from that address goes no faster:
// another bad token, a guess at ADMIN_TOKEN or at a key nobody has, is
// 429 before any look-up (ADMIN_TOKEN itself included: it names nobody,
// so a guess at it can only be told by its address). Guesses at one
// operator key's prefix are counted wherever they come from: ten, from
// ten addresses, and the eleventh waits, from anywhere. Failed sign-ins
// count as failed tokens do. (Before, ten bad tokens closed the address
// to every operator: 429 for the key, ADMIN_TOKEN and the sign-in.)
func TestAStrangerCannotLockOperatorsOut(t *testing.T) {
	t.Parallel()
	s := setup(t, setupOpts{rateLimits: httpapi.RateLimits{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
	}})
	ana, opKey, err := s.keys.Create(t.Context(), "test", "Ana", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	c := newContract(t, s) // the admin API's 429 is in api/openapi.yaml
	api := func(want int, addr, token string) response {
		t.Helper()
		return c.do(want, http.MethodGet, "/admin/v1/queue", "", "", map[string]string{"X-Forwarded-For": addr, "Authorization": "Bearer " + token})
	}
	signIn := func(b *browser, addr, key string) (int, http.Header) {
		t.Helper()
		status, h, _ := b.do(http.MethodPost, "/admin/sign-in", url.Values{"key": {key}}, "X-Forwarded-For", addr)
		return status, h
	}
	guess := 0
	randomKey := func() string { guess++; return fmt.Sprintf("sekali_key_guess%06d_secret", guess) }
	const office = "203.0.113.1"
	session := newBrowser(t, s.url) // Ana signed in from the office before
	if status, _ := signIn(session, office, opKey); status != http.StatusSeeOther {
		t.Fatalf("sign-in = %d", status)
	}

	// A stranger at the office: ten wrong tokens of every kind.
	for i := range 10 {
		token := randomKey()
		switch i % 3 {
		case 1:
			token = "a-guess-at-the-admin-token"
		case 2:
			token = ana.Prefix + "_a-guess-at-her-secret"
		}
		api(http.StatusUnauthorized, office, token)
	}
	// Ana's key still works from the office, on the API and at the sign-in,
	// and so does her session;
	api(http.StatusOK, office, opKey)
	if status, _ := signIn(newBrowser(t, s.url), office, opKey); status != http.StatusSeeOther {
		t.Errorf("a good sign-in from the office after ten wrong tokens: %d, want 303", status)
	}
	if status, _, _ := session.do(http.MethodGet, "/admin/", nil, "X-Forwarded-For", office); status != http.StatusOK {
		t.Errorf("her session from the office: %d, want 200", status)
	}
	// the stranger's next guesses there wait, whatever they guess at;
	for _, token := range []string{randomKey(), "another-guess", adminToken} {
		if res := api(http.StatusTooManyRequests, office, token); res.header.Get("Retry-After") != "90" {
			t.Errorf("a guess from the office after ten: Retry-After %q, want 90", res.header.Get("Retry-After"))
		}
	}
	if status, h := signIn(newBrowser(t, s.url), office, randomKey()); status != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Errorf("a wrong sign-in from the office after ten wrong tokens: %d, Retry-After %q; want 429", status, h.Get("Retry-After"))
	}
	// and another address is not affected.
	api(http.StatusOK, "203.0.113.2", adminToken)

	// Guesses at Ana's key from ten more addresses: with the three above,
	// the eleventh from anywhere waits, before any look-up.
	for i := range 7 {
		api(http.StatusUnauthorized, fmt.Sprintf("198.51.100.%d", i+1), ana.Prefix+"_guess")
	}
	api(http.StatusTooManyRequests, "198.51.100.99", ana.Prefix+"_guess")
	api(http.StatusOK, "198.51.100.99", adminToken) // the address itself is not closed

	// Failed sign-ins count as failed tokens do: ten close the address to
	// guesses on the admin API, not to an operator's key.
	const cafe = "192.0.2.7"
	for i := range 10 {
		if status, _ := signIn(newBrowser(t, s.url), cafe, randomKey()); status != http.StatusUnauthorized {
			t.Fatalf("failed sign-in %d: %d", i, status)
		}
	}
	api(http.StatusTooManyRequests, cafe, adminToken)
	api(http.StatusTooManyRequests, cafe, randomKey())
	_, budi, err := s.keys.Create(t.Context(), "test", "Budi", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	api(http.StatusOK, cafe, budi)
}

// A form must carry the session's CSRF token and, if the browser says
// where it comes from, come from the console.
func TestConsoleFormsNeedTheirToken(t *testing.T) {
	t.Parallel()
	s := setup(t)
	b, _ := s.operator(t, "Ana")
	_, _, body := b.do(http.MethodGet, "/admin/", nil)
	token := b.csrf(body)
	cases := map[string]struct {
		form   url.Values
		header []string
	}{
		"no token":     {url.Values{"note": {"x"}}, nil},
		"wrong token":  {url.Values{"note": {"x"}, "csrf": {token + "x"}}, nil},
		"other origin": {url.Values{"note": {"x"}, "csrf": {token}}, []string{"Origin", "https://evil.example"}},
	}
	for name, c := range cases {
		if status, _, _ := b.do(http.MethodPost, "/admin/queue/pause", c.form, c.header...); status != http.StatusForbidden {
			t.Errorf("%s: pause = %d, want 403", name, status)
		}
	}
	st, err := s.inspector.GetQueueInfo(s.redis.Queue)
	if err == nil && st.Paused {
		t.Error("a refused form paused the queue")
	}
	if status, _, _ := b.do(http.MethodPost, "/admin/queue/pause", url.Values{"note": {"provider incident"}, "csrf": {token}}, "Origin", s.url); status != http.StatusSeeOther {
		t.Errorf("pause with the token = %d, want 303", status)
	}
	if _, _, body := b.do(http.MethodGet, "/admin/", nil); !strings.Contains(body, "paused") {
		t.Error("the overview does not say the queue is paused")
	}
}

// Search by recipient and status, newest first, a page at a time; one
// delivery's page shows its timeline and the e-mail; a retry with a note
// is recorded under the operator's name.
func TestConsoleSearchOpenAndRetry(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var ids []string
	for _, email := range []string{"ana@example.com", "budi@example.com", "ana@example.com"} {
		var o order.Order
		s.postOrder(t, strings.Replace(validCheckout, "  Ana.Maria@Example.COM ", email, 1), nil).decode(t, &o)
		ids = append(ids, o.Notifications[0].ID.String())
	}
	s.f.Failed(s.f.Get(uuidOf(t, ids[2])), "550 5.1.1 no such user")
	b, k := s.operator(t, "Ana")

	_, _, body := b.do(http.MethodGet, "/admin/deliveries?recipient=ANA@example.com&order=newest", nil)
	if !strings.Contains(body, ids[2]) || !strings.Contains(body, ids[0]) || strings.Contains(body, ids[1]) ||
		strings.Index(body, ids[2]) > strings.Index(body, ids[0]) {
		t.Errorf("Ana's deliveries, newest first: want %s then %s, not %s:\n%s", ids[2], ids[0], ids[1], body)
	}
	_, _, body = b.do(http.MethodGet, "/admin/deliveries?status=failed", nil)
	if !strings.Contains(body, ids[2]) || strings.Contains(body, ids[0]) {
		t.Errorf("failed deliveries: want only %s", ids[2])
	}
	if status, _, body := b.do(http.MethodGet, "/admin/deliveries?order_id=nope", nil); status != http.StatusUnprocessableEntity || !strings.Contains(body, "not a UUID") {
		t.Errorf("a bad order id = %d", status)
	}

	status, _, page := b.do(http.MethodGet, "/admin/deliveries/"+ids[2], nil)
	if status != http.StatusOK || !strings.Contains(page, `id="retry"`) || !strings.Contains(page, "550 5.1.1 no such user") ||
		!strings.Contains(page, `sandbox src="/admin/deliveries/`+ids[2]+`/email"`) {
		t.Fatalf("the failed delivery's page = %d:\n%s", status, page)
	}
	status, h, email := b.do(http.MethodGet, "/admin/deliveries/"+ids[2]+"/email", nil)
	if status != http.StatusOK || !strings.Contains(email, "Teh melati") || !strings.Contains(h.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("the e-mail frame = %d, policy %q", status, h.Get("Content-Security-Policy"))
	}

	if status, _, _ := b.do(http.MethodPost, "/admin/deliveries/"+ids[2]+"/retry", url.Values{"csrf": {b.csrf(page)}, "note": {""}}); status != http.StatusUnprocessableEntity {
		t.Errorf("a retry without a note = %d, want 422", status)
	}
	status, h, _ = b.do(http.MethodPost, "/admin/deliveries/"+ids[2]+"/retry", url.Values{"csrf": {b.csrf(page)}, "note": {"the customer fixed the address"}})
	if status != http.StatusSeeOther || h.Get("Location") != "/admin/deliveries/"+ids[2] {
		t.Fatalf("retry = %d to %q", status, h.Get("Location"))
	}
	if d := s.f.Get(uuidOf(t, ids[2])); d.Status != notify.StatusPending {
		t.Errorf("after the retry the delivery is %s, want pending", d.Status)
	}
	_, _, page = b.do(http.MethodGet, "/admin/deliveries/"+ids[2], nil)
	if !strings.Contains(page, "operator:Ana ("+k.Prefix+")") {
		t.Errorf("the timeline does not name the operator:\n%s", page)
	}
	// A pending delivery is not retried again.
	if status, _, _ := b.do(http.MethodPost, "/admin/deliveries/"+ids[2]+"/retry", url.Values{"csrf": {b.csrf(page)}, "note": {"again"}}); status != http.StatusConflict {
		t.Errorf("retry of a pending delivery = %d, want 409", status)
	}
}

func uuidOf(t *testing.T, s string) uuid.UUID {
	t.Helper()
	id, err := uuid.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A bulk retry counts first and changes nothing; confirmed, it retries
// exactly what the search selects, each under the operator's name; it
// takes only failed or held deliveries.
func TestConsoleBulkRetry(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var ids []uuid.UUID
	for _, email := range []string{"ana@example.com", "ana@example.com", "budi@example.com"} {
		var o order.Order
		s.postOrder(t, strings.Replace(validCheckout, "  Ana.Maria@Example.COM ", email, 1), nil).decode(t, &o)
		id := o.Notifications[0].ID
		s.f.Failed(s.f.Get(id), "421 try later")
		ids = append(ids, id)
	}
	b, k := s.operator(t, "Ana")
	_, _, search := b.do(http.MethodGet, "/admin/deliveries?status=failed&recipient=ana@example.com", nil)
	if !strings.Contains(search, `id="bulk-retry"`) {
		t.Fatalf("a search of failed deliveries offers no bulk retry:\n%s", search)
	}
	form := url.Values{"csrf": {b.csrf(search)}, "status": {"failed"}, "recipient": {"ana@example.com"}, "note": {"relay fixed"}}
	status, _, counted := b.do(http.MethodPost, "/admin/deliveries/retry", form)
	if status != http.StatusOK || !strings.Contains(counted, "This retries 2 failed deliveries") {
		t.Fatalf("the count = %d:\n%s", status, counted)
	}
	for _, id := range ids {
		if d := s.f.Get(id); d.Status != notify.StatusFailed {
			t.Errorf("the count changed %s to %s", id, d.Status)
		}
	}
	form.Set("confirm", "2")
	status, _, done := b.do(http.MethodPost, "/admin/deliveries/retry", form)
	if status != http.StatusOK || !strings.Contains(done, "Retried 2 deliveries") {
		t.Fatalf("the retry = %d:\n%s", status, done)
	}
	for i, want := range []notify.Status{notify.StatusPending, notify.StatusPending, notify.StatusFailed} {
		if d := s.f.Get(ids[i]); d.Status != want {
			t.Errorf("delivery %d is %s, want %s", i, d.Status, want)
		}
	}
	_, _, page := b.do(http.MethodGet, "/admin/deliveries/"+ids[0].String(), nil)
	if !strings.Contains(page, "operator:Ana ("+k.Prefix+")") || !strings.Contains(page, "relay fixed") {
		t.Error("the retried delivery's timeline lacks the operator or the note")
	}
	form.Set("status", "pending")
	if status, _, _ := b.do(http.MethodPost, "/admin/deliveries/retry", form); status != http.StatusUnprocessableEntity {
		t.Errorf("a bulk retry of pending deliveries = %d, want 422", status)
	}
}

// Suppressions, blocks and API keys: each change with its note, the
// suppression list's history naming the operator; a key made here works
// with its scopes, and stops when revoked here.
func TestConsoleSuppressionsBlocksAndKeys(t *testing.T) {
	t.Parallel()
	s := setup(t)
	b, k := s.operator(t, "Ana")
	_, _, page := b.do(http.MethodGet, "/admin/suppressions", nil)
	csrf := b.csrf(page)

	if status, _, _ := b.do(http.MethodPost, "/admin/suppressions", url.Values{"csrf": {csrf}, "recipient": {"not an address"}, "note": {"x"}}); status != http.StatusUnprocessableEntity {
		t.Errorf("suppressing a non-address = %d, want 422", status)
	}
	status, h, _ := b.do(http.MethodPost, "/admin/suppressions", url.Values{"csrf": {csrf}, "recipient": {"Budi@Example.com"}, "note": {"asked us by phone"}})
	if status != http.StatusSeeOther {
		t.Fatalf("suppress = %d", status)
	}
	_, _, page = b.do(http.MethodGet, h.Get("Location"), nil)
	if !strings.Contains(page, "budi@example.com") || !strings.Contains(page, "operator:Ana ("+k.Prefix+")") || !strings.Contains(page, "asked us by phone") {
		t.Errorf("the entry's page lacks the address, the operator or the note:\n%s", page)
	}
	b.do(http.MethodPost, "/admin/suppressions/remove", url.Values{"csrf": {csrf}, "recipient": {"budi@example.com"}, "note": {"wrong person"}})
	_, _, page = b.do(http.MethodGet, "/admin/suppressions?recipient=budi@example.com", nil)
	if !strings.Contains(page, "is not on the list") || !strings.Contains(page, "wrong person") {
		t.Errorf("after removal:\n%s", page)
	}

	if status, _, _ := b.do(http.MethodPost, "/admin/blocks", url.Values{"csrf": {csrf}, "kind": {"recipient"}, "value": {"ana@example.com"}, "reason": {"x"}, "ttl": {"90d"}}); status != http.StatusUnprocessableEntity {
		t.Errorf("a block of 90d = %d, want 422", status)
	}
	b.do(http.MethodPost, "/admin/blocks", url.Values{"csrf": {csrf}, "kind": {"recipient"}, "value": {"Ana@Example.com"}, "reason": {"complaint under review"}, "ttl": {"2h"}})
	_, _, page = b.do(http.MethodGet, "/admin/blocks", nil)
	lift := regexp.MustCompile(`action="(/admin/blocks/[0-9]+/remove)"`).FindStringSubmatch(page)
	if lift == nil || !strings.Contains(page, "ana@example.com") || !strings.Contains(page, "complaint under review") || s.count(t, "delivery_blocks") != 1 {
		t.Fatalf("the blocks page after adding one:\n%s", page)
	}
	b.do(http.MethodPost, lift[1], url.Values{"csrf": {csrf}})
	if n := s.count(t, "delivery_blocks"); n != 0 {
		t.Errorf("%d blocks after lifting the only one", n)
	}

	status, _, page = b.do(http.MethodPost, "/admin/api-keys", url.Values{"csrf": {csrf}, "name": {"shop-backend-2027"}, "scopes": {"checkout", "orders:read"}})
	m := regexp.MustCompile(`id="new-key">([^<]+)<`).FindStringSubmatch(page)
	if status != http.StatusCreated || m == nil {
		t.Fatalf("create key = %d:\n%s", status, page)
	}
	made, err := s.keys.Authenticate(context.Background(), m[1])
	if err != nil || !made.Has(apikey.ScopeCheckout) || !made.Has(apikey.ScopeOrdersRead) || made.Has(apikey.ScopeOrdersWrite) {
		t.Fatalf("the key made in the console: %+v, %v", made, err)
	}
	if status, _, _ := b.do(http.MethodPost, "/admin/api-keys", url.Values{"csrf": {csrf}, "name": {"no scopes"}}); status != http.StatusUnprocessableEntity {
		t.Errorf("a key without scopes = %d, want 422", status)
	}
	b.do(http.MethodPost, "/admin/api-keys/"+made.ID.String()+"/revoke", url.Values{"csrf": {csrf}})
	list, err := s.keys.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range list {
		if key.ID == made.ID && key.RevokedAt == nil {
			t.Error("the key revoked in the console is not revoked")
		}
	}
}

// A search by creation time, and its pages: 50 a page, the next page
// holding the rest, the same search carried along.
func TestConsoleSearchByTimeAndPages(t *testing.T) {
	t.Parallel()
	s := setup(t)
	before := time.Now().UTC().Add(-time.Minute).Format("2006-01-02T15:04")
	for range 51 {
		s.postOrder(t, validCheckout, nil)
	}
	after := time.Now().UTC().Add(2 * time.Minute).Format("2006-01-02T15:04")
	b, _ := s.operator(t, "Ana")
	rows := regexp.MustCompile(`<a href="/admin/deliveries/[0-9a-f-]{36}">`)
	_, _, page := b.do(http.MethodGet, "/admin/deliveries?created_after="+after, nil)
	if n := len(rows.FindAllString(page, -1)); n != 0 {
		t.Errorf("created after the orders: %d rows, want 0", n)
	}
	_, _, page = b.do(http.MethodGet, "/admin/deliveries?order=oldest&created_after="+before+"&created_before="+after, nil)
	if n := len(rows.FindAllString(page, -1)); n != 50 {
		t.Errorf("the first page has %d rows, want 50", n)
	}
	next := regexp.MustCompile(`href="([^"]+)" id="next"`).FindStringSubmatch(page)
	if next == nil {
		t.Fatalf("no next page:\n%s", page)
	}
	link := strings.ReplaceAll(next[1], "&amp;", "&")
	if !strings.Contains(link, "created_after="+url.QueryEscape(before)) || !strings.Contains(link, "page=1") {
		t.Errorf("the next page's link %q does not carry the search", link)
	}
	_, _, page = b.do(http.MethodGet, link, nil)
	if n := len(rows.FindAllString(page, -1)); n != 1 || !strings.Contains(page, `id="prev"`) || strings.Contains(page, `id="next"`) {
		t.Errorf("the second page: %d rows, want 1, a previous and no next page", n)
	}
	if status, _, _ := b.do(http.MethodGet, "/admin/deliveries?created_after=yesterday", nil); status != http.StatusUnprocessableEntity {
		t.Errorf("a time that does not parse = %d, want 422", status)
	}
}

// A pending delivery can be cancelled from its page, with a note under
// the operator's name; a sent one offers no cancel.
func TestConsoleCancel(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	id := o.Notifications[0].ID.String()
	b, k := s.operator(t, "Ana")
	_, _, page := b.do(http.MethodGet, "/admin/deliveries/"+id, nil)
	if !strings.Contains(page, `id="cancel"`) {
		t.Fatalf("a pending delivery's page offers no cancel:\n%s", page)
	}
	status, _, _ := b.do(http.MethodPost, "/admin/deliveries/"+id+"/cancel", url.Values{"csrf": {b.csrf(page)}, "note": {"order refunded"}})
	if status != http.StatusSeeOther {
		t.Fatalf("cancel = %d", status)
	}
	if d := s.f.Get(uuidOf(t, id)); d.Status != notify.StatusCancelled {
		t.Errorf("after the cancel the delivery is %s", d.Status)
	}
	_, _, page = b.do(http.MethodGet, "/admin/deliveries/"+id, nil)
	if strings.Contains(page, `id="cancel"`) || !strings.Contains(page, "operator:Ana ("+k.Prefix+")") || !strings.Contains(page, "order refunded") {
		t.Errorf("the cancelled delivery's page:\n%s", page)
	}
}

// A delivery's page names its order as the shop does, by its number,
// beside the order's id; an order without one, by its id alone.
func TestConsoleShowsTheOrderNumber(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var numbered, plain order.Order
	s.postOrder(t, strings.Replace(validCheckout, `"currency": "IDR",`, `"currency": "IDR", "reference": "TA-2026-0042",`, 1), nil).decode(t, &numbered)
	s.postOrder(t, validCheckout, nil).decode(t, &plain)
	b, _ := s.operator(t, "Ana")
	_, _, page := b.do(http.MethodGet, "/admin/deliveries/"+numbered.Notifications[0].ID.String(), nil)
	if !strings.Contains(page, `<strong id="order-reference">TA-2026-0042</strong>`) || !strings.Contains(page, numbered.ID.String()) {
		t.Errorf("the page of a numbered order's delivery:\n%s", page)
	}
	_, _, page = b.do(http.MethodGet, "/admin/deliveries/"+plain.Notifications[0].ID.String(), nil)
	if strings.Contains(page, `id="order-reference"`) || !strings.Contains(page, plain.ID.String()) {
		t.Errorf("the page of an order without a number:\n%s", page)
	}
}

// The console's e-mail frame loads no remote image unless the operator
// asks: by default its policy takes images inside the e-mail (data:)
// only, so a tracking pixel learns nothing of who opened it; the link
// next to the frame reloads it with ?images=remote, whose policy takes
// https images too. Both stay sandboxed, framed by the console alone,
// and send no Referer.
func TestConsoleEmailHoldsRemoteImagesBack(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	id := o.Notifications[0].ID.String()
	b, _ := s.operator(t, "Ana")

	_, _, page := b.do(http.MethodGet, "/admin/deliveries/"+id, nil)
	if !strings.Contains(page, `name="email" sandbox src="/admin/deliveries/`+id+`/email"`) ||
		!strings.Contains(page, `href="/admin/deliveries/`+id+`/email?images=remote" target="email"`) {
		t.Errorf("the delivery's page lacks the frame named email or the link that loads remote images into it:\n%s", page)
	}
	policy := func(path string) map[string]string {
		t.Helper()
		status, h, body := b.do(http.MethodGet, path, nil)
		if status != http.StatusOK || !strings.Contains(body, "Teh melati") || h.Get("Referrer-Policy") != "no-referrer" || h.Get("Cache-Control") != "no-store" {
			t.Errorf("%s = %d, Referrer-Policy %q, Cache-Control %q", path, status, h.Get("Referrer-Policy"), h.Get("Cache-Control"))
		}
		directives := map[string]string{}
		for _, d := range strings.Split(h.Get("Content-Security-Policy"), ";") {
			name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
			directives[name] = value
		}
		return directives
	}
	held := policy("/admin/deliveries/" + id + "/email")
	asked := policy("/admin/deliveries/" + id + "/email?images=remote")
	for name, want := range map[string][2]string{
		"img-src":         {"data:", "data: https:"},
		"default-src":     {"'none'", "'none'"},
		"frame-ancestors": {"'self'", "'self'"},
		"sandbox":         {"", ""},
	} {
		got := [2]string{held[name], asked[name]}
		_, heldHas := held[name]
		_, askedHas := asked[name]
		if got != want || !heldHas || !askedHas {
			t.Errorf("%s: %q by default and %q with ?images=remote, want %q", name, got[0], got[1], want)
		}
	}
	if p := policy("/admin/deliveries/" + id + "/email?images=yes"); p["img-src"] != "data:" {
		t.Errorf("?images=yes: img-src %q, want data: (only remote asks)", p["img-src"])
	}
}

// The overview counts held and failed deliveries alike: exactly below
// the count's limit, and at it a number that says there may be more.
func TestConsoleOverviewCounts(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	data := map[string]any{"order_id": o.ID.String(), "customer_name": "Ana", "carrier": "JNE", "tracking_number": "JNE-1",
		"items": []map[string]any{{"sku": "TEA-01", "name": "Teh", "quantity": 1}}, "shipped_at": "2026-12-01T10:00:00Z"}
	for i := range 100 {
		d := s.f.Scheduled(o.ID, "order-shipped", fmt.Sprintf("failed-%d@example.com", i), data, time.Now())
		s.f.Failed(d, "550 5.1.1 no such user")
	}
	for i := range 3 {
		s.f.Held(s.f.Scheduled(o.ID, "order-shipped", fmt.Sprintf("held-%d@example.com", i), data, time.Now()), "cannot render")
	}
	b, _ := s.operator(t, "Ana")
	_, _, page := b.do(http.MethodGet, "/admin/", nil)
	held := regexp.MustCompile(`id="held">([^<]*)<`).FindStringSubmatch(page)
	failed := regexp.MustCompile(`id="failed">([^<]*)<`).FindStringSubmatch(page)
	if held == nil || failed == nil {
		t.Fatalf("the overview has no held or failed count:\n%s", page)
	}
	if got := strings.Join(strings.Fields(held[1]), " "); got != "3 held" {
		t.Errorf("held: %q, want 3 held", got)
	}
	if got := strings.Join(strings.Fields(failed[1]), " "); got != "100 or more failed" {
		t.Errorf("failed: %q, want 100 or more failed", got)
	}
}
