package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/resend/resendtest"
)

// No input makes a 5xx: every route the router has (chi.Walk, so a route
// added to routes.go is fuzzed without a line here) is sent random path
// segments, query strings, bodies and credentials, NUL bytes and invalid
// UTF-8 included, and answers each with a 4xx or less. A 5xx is a door
// some input walks through into a failure of ours: text PostgreSQL
// refuses, a constraint the handler did not check, a panic.
//
// One database serves every iteration (an iteration is a request or two
// to it); make test runs this briefly, make fuzz longer.
func FuzzEveryRoute(f *testing.F) {
	s, resendSecret := hookStack(f)
	var routes []fuzzRoute
	if err := chi.Walk(s.handler.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, fuzzRoute{method, pattern})
		return nil
	}); err != nil {
		f.Fatal(err)
	}

	// What a segment may name to reach past "no such thing": an order
	// and its confirmation, made here ($order, $notification); and
	// another order's, sent, for the providers' events ($sent).
	var o, sent order.Order
	for _, placed := range []*order.Order{&o, &sent} {
		if res, err := s.send(http.MethodPost, "/v1/orders", "application/json", strings.NewReader(validCheckout), nil); err != nil || res.status != http.StatusCreated {
			f.Fatalf("checkout: %v %d %s", err, res.status, res.body)
		} else if err := json.Unmarshal(res.body, placed); err != nil {
			f.Fatal(err)
		}
	}
	const sentID = "fuzz-sent-1"
	s.f.Sent(s.f.Get(sent.Notifications[0].ID), sentID)
	ctx := context.Background()
	_, operatorKey, err := s.keys.Create(ctx, "test", "fuzz operator", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		f.Fatal(err)
	}
	session, sessionSecret, err := s.keys.SignIn(ctx, operatorKey)
	if err != nil {
		f.Fatal(err)
	}
	placeholders := strings.NewReplacer("$order", o.ID.String(), "$notification", o.Notifications[0].ID.String(), "$sent", sentID)

	// Seeds: each route once with a credential that passes, and the
	// inputs that once answered 500.
	for i, r := range routes {
		f.Add(uint16(i), credFor(r.pattern), "$order", "", []byte(`{}`), "")
	}
	index := func(method, pattern string) uint16 {
		for i, r := range routes {
			if r.method == method && r.pattern == pattern {
				return uint16(i)
			}
		}
		f.Fatalf("no route %s %s", method, pattern)
		return 0
	}
	cancelTemplate := index(http.MethodPost, "/v1/orders/{id}/notifications/cancel")
	f.Add(cancelTemplate, credBackend, "$order", "", []byte(`{"template":"a\u0000"}`), "")
	f.Add(cancelTemplate, credBackend, "$order", "", []byte("{\"template\":\"a\xff\"}"), "")
	f.Add(cancelTemplate, credBackend, "$order", "", []byte(`{"template":"\ud800"}`), "")
	f.Add(index(http.MethodPost, "/v1/orders/{id}/notifications"), credBackend, "$order", "",
		[]byte(`{"template":"order-shipped","data":{"a\u0000":1}}`), "")
	f.Add(index(http.MethodPost, "/v1/orders"), credBackend, "", "", []byte(`{"customer_email":"a@b.co","customer_name":"\u0000"}`), "")
	unsubscribe := index(http.MethodPost, "/v1/unsubscribe/{token}")
	for _, category := range []string{"newsletter", "transactional", "subscription\x00"} {
		f.Add(unsubscribe, credNone, mail.UnsubscribeToken(unsubscribeSecret, "ana@example.com", category, time.Now()), "", []byte(nil), "")
	}
	f.Add(unsubscribe, credNone, mail.UnsubscribeToken(unsubscribeSecret, "ana\x00@example.com", "subscription", time.Now()), "", []byte(nil), "")
	f.Add(index(http.MethodGet, "/v1/orders/{id}"), credFuzzed, "$order", "", []byte(nil), "sekali_key_\xff_x")
	f.Add(index(http.MethodGet, "/v1/orders/{id}"), credFuzzed, "$order", "", []byte(nil), "sekali_key_\x00_x")
	f.Add(index(http.MethodGet, "/admin/v1/deliveries"), credAdmin, "", "recipient=%00&template=%ff&status=a%00", []byte(nil), "")
	f.Add(index(http.MethodGet, "/admin/deliveries"), credSession, "", "recipient=%00&template=%ff", []byte(nil), "")
	f.Add(index(http.MethodGet, "/admin/v1/suppressions/{recipient}"), credAdmin, "a\x00@b.co", "", []byte(nil), "")
	f.Add(index(http.MethodPost, "/admin/suppressions"), credSession|1<<3, "", "", []byte("recipient=a%00%40b.co&note=%ff"), "")
	f.Add(index(http.MethodPost, "/admin/suppressions"), credSession|1<<3, "", "", []byte("recipient=a%40b.co&note=a%00"), "")
	webhook := index(http.MethodPost, "/v1/webhooks/{provider}")
	for _, id := range []string{"\\u0000", "$sent"} { // $sent in a body is replaced too
		f.Add(webhook, credPostmark, "postmark", "", []byte(`{"RecordType":"Bounce","ID":1,"MessageID":"`+id+
			`","Type":"HardBounce","Email":"ana.maria@example.com","BouncedAt":"2026-01-01T00:00:00Z","Details":"\u0000\ud800"}`), "")
		f.Add(webhook, credResend, "resend", "", []byte(`{"type":"email.bounced","created_at":"2026-01-01T00:00:00Z","data":{"email_id":"`+id+
			`","to":["ana.maria@example.com"],"bounce":{"message":"\u0000","type":"Permanent"},"tags":{"a\u0000":"\u0000"}}}`), "")
	}

	var requests atomic.Uint32
	f.Fuzz(func(t *testing.T, route uint16, cred uint8, segment, query string, body []byte, token string) {
		r := routes[int(route)%len(routes)]
		segment = placeholders.Replace(segment)
		body = []byte(placeholders.Replace(string(body)))
		target := pathParam.ReplaceAllLiteralString(r.pattern, url.PathEscape(segment))
		if query != "" {
			target += "?" + escapeQuery(query)
		}
		if _, err := url.ParseRequestURI(target); err != nil {
			t.Skip("no server takes this request line:", err)
		}
		contentType := []string{"application/json", "application/x-www-form-urlencoded", "", "text/plain"}[cred>>3&3]
		if cred&7 == credSession && contentType == "application/x-www-form-urlencoded" {
			body = append([]byte("csrf="+session.CSRF+"&"), body...)
		}
		req := httptest.NewRequest(r.method, target, bytes.NewReader(body))
		// Each request from an address of its own: the budget of failed
		// credentials per address would otherwise answer 429 to all.
		n := requests.Add(1)
		req.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:4321", n>>16&255, n>>8&255, n&255)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		switch cred & 7 {
		case credBackend:
			req.Header.Set("Authorization", "Bearer "+s.backendKey)
		case credAdmin:
			req.Header.Set("Authorization", "Bearer "+adminToken)
		case credOperator:
			req.Header.Set("Authorization", "Bearer "+operatorKey)
		case credSession:
			if r.pattern != "/admin/sign-out" { // which would end the session every later request uses
				req.AddCookie(&http.Cookie{Name: "sekali_console", Value: sessionSecret})
			}
		case credFuzzed:
			req.Header["Authorization"] = []string{"Bearer " + token}
		case credPostmark:
			req.SetBasicAuth(postmarkUser, postmarkPassword)
		case credResend:
			h, err := resendtest.SignWebhook(resendSecret, "msg_"+token, time.Now(), body)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range h {
				req.Header[k] = v
			}
		}
		rec := httptest.NewRecorder()
		s.handler.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s (credential %d, %q) = %d %s\nlog: %s", r.method, target, cred, contentType, rec.Code, rec.Body,
				logLineOf(s.logs.String(), rec.Header().Get("X-Request-Id")))
		}
	})
}

// fuzzRoute is one of the router's routes.
type fuzzRoute struct{ method, pattern string }

// The credentials FuzzEveryRoute sends, by the low three bits of its
// cred (the next two pick the Content-Type).
const (
	credNone     uint8 = iota
	credBackend        // the backend's key, every backend scope
	credAdmin          // ADMIN_TOKEN
	credOperator       // an operator's key
	credSession        // the console's session, and its CSRF token in a form body
	credFuzzed         // Authorization: Bearer <the fuzzed token>
	credPostmark       // Postmark's webhook credentials
	credResend         // Resend's webhook signature over the body
)

// credFor is the credential a route's pattern takes.
func credFor(pattern string) uint8 {
	switch {
	case strings.HasPrefix(pattern, "/admin/v1/"):
		return credAdmin
	case strings.HasPrefix(pattern, "/admin/"):
		return credSession | 1<<3 // a form
	case pattern == "/v1/webhooks/{provider}":
		return credPostmark
	default:
		return credBackend
	}
}

// pathParam is a chi pattern's parameter.
var pathParam = regexp.MustCompile(`\{[^}]*\}`)

// escapeQuery makes q fit a request line: what may not stand there
// (controls, spaces, '#', bytes beyond ASCII) is percent-encoded, and a
// '%' is kept as it is, so that q may hold any escape, a bad one too.
func escapeQuery(q string) string {
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		if c := q[i]; c <= ' ' || c >= 0x7f || c == '#' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// logLineOf is the log line of the request whose id is id.
func logLineOf(logs, id string) string {
	for line := range strings.Lines(logs) {
		if id != "" && strings.Contains(line, `"request_id":"`+id+`"`) && strings.Contains(line, `"msg":"http request"`) {
			return line
		}
	}
	return "(none)"
}
