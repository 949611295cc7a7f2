package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Every class of bad input gets a problem+json answer that names the
// field, and writes nothing.
func TestBadCheckoutInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	s := setup(t)

	// body builds a checkout from the valid one with one field replaced.
	body := func(field, value string) string {
		m := map[string]json.RawMessage{}
		if err := json.Unmarshal([]byte(validCheckout), &m); err != nil {
			t.Fatal(err)
		}
		if value == "" {
			delete(m, field)
		} else {
			m[field] = json.RawMessage(value)
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	item := func(fields string) string { return `[{"sku":"A","name":"B",` + fields + `}]` }

	tests := []struct {
		name        string
		contentType string
		body        string
		header      map[string]string
		status      int
		problemType string
		pointer     string // "" when the problem names no field
	}{
		{"malformed JSON", "", `{"customer_email":`, nil, 400, "invalid-body", ""},
		{"not an object", "", `[1,2]`, nil, 400, "invalid-body", ""},
		{"empty body", "", ``, nil, 400, "invalid-body", ""},
		{"trailing data", "", validCheckout + `{}`, nil, 400, "invalid-body", ""},
		{"unknown field", "", body("coupon", `"FREE"`), nil, 400, "invalid-body", "/coupon"},
		{"unknown item field", "", body("items", item(`"quantity":1,"unit_price":1,"discount":5`)), nil, 400, "invalid-body", "/items/0/discount"},
		{"string quantity", "", body("items", item(`"quantity":"2","unit_price":1`)), nil, 400, "invalid-body", "/items/0/quantity"},
		{"fractional quantity", "", body("items", item(`"quantity":1.5,"unit_price":1`)), nil, 400, "invalid-body", "/items/0/quantity"},
		{"price beyond int64", "", body("items", item(`"quantity":1,"unit_price":99999999999999999999`)), nil, 400, "invalid-body", "/items/0/unit_price"},
		{"email as number", "", body("customer_email", `42`), nil, 400, "invalid-body", "/customer_email"},
		{"body over the limit", "", body("customer_name", `"`+strings.Repeat("x", 70_000)+`"`), nil, 413, "body-too-large", ""},
		{"form content type", "application/x-www-form-urlencoded", validCheckout, nil, 415, "unsupported-media-type", ""},
		{"missing email", "", body("customer_email", ""), nil, 422, "validation", "/customer_email"},
		{"email with display name", "", body("customer_email", `"Ana <ana@example.com>"`), nil, 422, "validation", "/customer_email"},
		{"email with CRLF", "", body("customer_email", `"ana@example.com\r\nRCPT TO:<eve@example.com>"`), nil, 422, "validation", "/customer_email"},
		{"email with SMTP parameter", "", body("customer_email", `"ana@example.com> NOTIFY=SUCCESS"`), nil, 422, "validation", "/customer_email"},
		{"two addresses", "", body("customer_email", `"ana@example.com,eve@example.com"`), nil, 422, "validation", "/customer_email"},
		{"empty name", "", body("customer_name", `"  "`), nil, 422, "validation", "/customer_name"},
		{"name with newline", "", body("customer_name", `"Ana\nBcc: eve@example.com"`), nil, 422, "validation", "/customer_name"},
		{"unknown currency", "", body("currency", `"ABC"`), nil, 422, "validation", "/currency"},
		{"lower-case currency", "", body("currency", `"idr"`), nil, 422, "validation", "/currency"},
		{"no items", "", body("items", `[]`), nil, 422, "validation", "/items"},
		{"items missing", "", body("items", ""), nil, 422, "validation", "/items"},
		{"zero quantity", "", body("items", item(`"quantity":0,"unit_price":1`)), nil, 422, "validation", "/items/0/quantity"},
		{"negative quantity", "", body("items", item(`"quantity":-1,"unit_price":1`)), nil, 422, "validation", "/items/0/quantity"},
		{"negative price", "", body("items", item(`"quantity":1,"unit_price":-1`)), nil, 422, "validation", "/items/0/unit_price"},
		{"missing price", "", body("items", item(`"quantity":1`)), nil, 422, "validation", "/items/0/unit_price"},
		{"empty sku", "", body("items", `[{"sku":"","name":"B","quantity":1,"unit_price":1}]`), nil, 422, "validation", "/items/0/sku"},
		{"line total overflows", "", body("items", item(`"quantity":1000000,"unit_price":9007199254740991`)), nil, 422, "validation", "/items/0"},
		{"total overflows", "", body("items", `[
			{"sku":"A","name":"A","quantity":1,"unit_price":9007199254740991},
			{"sku":"B","name":"B","quantity":1,"unit_price":1}]`), nil, 422, "validation", "/items"},
		{"too many items", "", body("items", "["+strings.TrimSuffix(strings.Repeat(`{"sku":"A","name":"A","quantity":1,"unit_price":1},`, 101), ",")+"]"), nil, 422, "validation", "/items"},
		{"null body", "", `null`, nil, 400, "invalid-body", ""},
		{"null item", "", body("items", `[null]`), nil, 400, "invalid-body", "/items/0"},
		{"item that is a string", "", body("items", `["A"]`), nil, 400, "invalid-body", "/items/0"},
		{"string body", "", `"checkout"`, nil, 400, "invalid-body", ""},
		{"repeated key", "", `{"customer_email":"ana@example.com","customer_email":"eve@example.com","customer_name":"A","currency":"IDR","items":[]}`, nil, 400, "invalid-body", "/customer_email"},
		{"repeated key in an item", "", body("items", `[{"sku":"A","name":"B","quantity":1,"quantity":9,"unit_price":1}]`), nil, 400, "invalid-body", "/items/0/quantity"},
		// encoding/json matches field names regardless of case, so these
		// are repeats too: the last would win.
		{"repeated key in another case", "", `{"customer_email":"ana@example.com","CUSTOMER_EMAIL":"eve@example.com","customer_name":"A","currency":"IDR","items":[]}`, nil, 400, "invalid-body", "/CUSTOMER_EMAIL"},
		{"repeated key in mixed case", "", `{"customer_email":"ana@example.com","customer_name":"A","currency":"IDR","Currency":"USD","items":[]}`, nil, 400, "invalid-body", "/Currency"},
		{"repeated key under Unicode folding", "", body("items", `[{"sku":"A","\u017fku":"B","name":"B","quantity":1,"unit_price":1}]`), nil, 400, "invalid-body", "/items/0/\u017fku"},
		{"invalid UTF-8", "", strings.Replace(validCheckout, "Ana Maria", "Ana \xff Maria", 1), nil, 400, "invalid-body", ""},
		{"NUL in a name", "", body("customer_name", `"Ana\u0000"`), nil, 400, "invalid-body", "/customer_name"},
		{"NUL in an item", "", body("items", `[{"sku":"A\u0000","name":"B","quantity":1,"unit_price":1}]`), nil, 400, "invalid-body", "/items/0/sku"},
		{"NUL in a key", "", body("coupon\u0000", `1`), nil, 400, "invalid-body", "/coupon\u0000"},
		{"email at an IP address", "", body("customer_email", `"a@1.2.3.4"`), nil, 422, "validation", "/customer_email"},
		{"email with a numeric TLD", "", body("customer_email", `"a@example.123"`), nil, 422, "validation", "/customer_email"},
		{"name with a line separator", "", body("customer_name", `"Ana\u2028Bcc: eve@example.com"`), nil, 422, "validation", "/customer_name"},
		{"name with a bidi override", "", body("customer_name", `"\u202eanA"`), nil, 422, "validation", "/customer_name"},
		{"name of zero-width spaces", "", body("customer_name", `"\u200b\u200b\u200b"`), nil, 422, "validation", "/customer_name"},
		{"item name with a paragraph separator", "", body("items", `[{"sku":"A","name":"B\u2029C","quantity":1,"unit_price":1}]`), nil, 422, "validation", "/items/0/name"},
		{"empty idempotency key", "", validCheckout, map[string]string{"Idempotency-Key": `""`}, 400, "invalid-idempotency-key", ""},
		{"idempotency key with spaces", "", validCheckout, map[string]string{"Idempotency-Key": "a b"}, 400, "invalid-idempotency-key", ""},
		{"idempotency key too long", "", validCheckout, map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, 400, "invalid-idempotency-key", ""},
	}
	for _, tt := range tests {
		ct := tt.contentType
		if ct == "" {
			ct = "application/json"
		}
		res := s.do(t, http.MethodPost, "/v1/orders", ct, strings.NewReader(tt.body), tt.header)
		if res.status != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.name, res.status, tt.status, res.body)
			continue
		}
		if got := res.header.Get("Content-Type"); got != "application/problem+json" {
			t.Errorf("%s: Content-Type %q", tt.name, got)
		}
		var p struct {
			Type   string `json:"type"`
			Status int    `json:"status"`
			Detail string `json:"detail"`
			Errors []struct {
				Pointer string `json:"pointer"`
				Detail  string `json:"detail"`
			} `json:"errors"`
		}
		res.decode(t, &p)
		if p.Type != "urn:sekali:problem:"+tt.problemType || p.Status != tt.status || p.Detail == "" {
			t.Errorf("%s: problem %+v, want type %s", tt.name, p, tt.problemType)
		}
		if tt.pointer != "" {
			found := false
			for _, e := range p.Errors {
				found = found || (e.Pointer == tt.pointer && e.Detail != "")
			}
			if !found {
				t.Errorf("%s: errors %+v do not name %s", tt.name, p.Errors, tt.pointer)
			}
		}
	}

	for _, table := range []string{"orders", "order_items", "notification_deliveries", "idempotency_keys"} {
		if n := s.count(t, table); n != 0 {
			t.Errorf("%s has %d rows after only bad requests", table, n)
		}
	}
	if strings.Contains(s.logs.String(), `"level":"ERROR"`) {
		t.Errorf("bad input was logged as a server error:\n%s", s.logs)
	}
}

func TestUnknownRoutesAndMethodsAreProblems(t *testing.T) {
	t.Parallel()
	s := bare(t, nil)
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string // the Allow header of a 405
	}{
		{http.MethodGet, "/v1/nothing", 404, ""},
		{http.MethodDelete, "/v1/orders", 405, "POST"},
		{http.MethodPut, "/v1/orders/" + "0190c5a0-0000-7000-8000-000000000000", 405, "GET, HEAD"},
		{http.MethodGet, "/v1/orders/0190c5a0-0000-7000-8000-000000000000/shipments", 405, "POST"},
	} {
		res := s.do(t, tc.method, tc.path, "", nil, nil)
		if res.status != tc.status || res.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s = %d %s", tc.method, tc.path, res.status, res.header.Get("Content-Type"))
		}
		if got := res.header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
	}
}

// HEAD is answered wherever GET is, with GET's status and headers and no body.
func TestHeadWhereverGet(t *testing.T) {
	t.Parallel()
	s := bare(t, nil)
	for _, path := range []string{"/healthz", "/readyz", "/v1/templates", "/openapi.yaml"} {
		res := s.do(t, http.MethodHead, path, "", nil, nil)
		if res.status != http.StatusOK || len(res.body) != 0 || res.header.Get("Content-Type") == "" {
			t.Errorf("HEAD %s = %d, %d bytes, Content-Type %q", path, res.status, len(res.body), res.header.Get("Content-Type"))
		}
	}
}

// Text PostgreSQL's text refuses (NUL, invalid UTF-8) is refused before
// any route reads it, in a path (404), a query (400 invalid-query) or a
// form (400 invalid-body), whatever the route: it never reaches a
// statement as a 500.
func TestUnstorableTextIsRefusedForEveryRoute(t *testing.T) {
	t.Parallel()
	s := bare(t, nil)
	for _, tt := range []struct {
		method, path, contentType, body string
		status                          int
		problemType                     string
	}{
		{"GET", "/v1/templates/order-shipped%00/preview", "", "", 404, "not-found"},
		{"GET", "/v1/templates/%ff/preview", "", "", 404, "not-found"},
		{"GET", "/v1/templates?lang=%00", "", "", 400, "invalid-query"},
		{"GET", "/v1/templates/order-shipped/preview?lang=en%ff", "", "", 400, "invalid-query"},
		{"GET", "/admin/v1/deliveries?%00=1", "", "", 400, "invalid-query"},
		{"POST", "/admin/sign-in", "application/x-www-form-urlencoded", "key=%ff", 400, "invalid-body"},
		{"POST", "/admin/suppressions", "application/x-www-form-urlencoded", "recipient=a%40b.co&note=a%00b", 400, "invalid-body"},
	} {
		res := s.do(t, tt.method, tt.path, tt.contentType, strings.NewReader(tt.body), map[string]string{"Authorization": ""})
		var p struct{ Type string }
		if res.status != tt.status || json.Unmarshal(res.body, &p) != nil || p.Type != "urn:sekali:problem:"+tt.problemType {
			t.Errorf("%s %s %q: %d %s, want %d %s", tt.method, tt.path, tt.body, res.status, res.body, tt.status, tt.problemType)
		}
	}
	// Text that is storable passes on to the route.
	if res := s.do(t, "GET", "/v1/templates?lang=%C3%A9", "", nil, map[string]string{"Authorization": ""}); res.status != 200 {
		t.Errorf("a query of valid UTF-8: %d %s", res.status, res.body)
	}
}
