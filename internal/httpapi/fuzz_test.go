package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sekali-dev/sekali/internal/order"
)

// The checkout decoder and validator never panic, and whatever they let
// through is a checkout the service can record: every answer is either a
// checkout that validates or a 4xx problem naming what is wrong. make
// test runs this briefly; make fuzz runs it longer.
func FuzzCheckoutBody(f *testing.F) {
	for _, seed := range []string{
		`{"customer_email":"ana@example.com","customer_name":"Ana","currency":"IDR","items":[{"sku":"A","name":"B","quantity":1,"unit_price":1}]}`,
		`{"customer_email":"a@b.co","customer_email":"c@d.co"}`,
		`{"items":[{"sku":"A","sku":"B"}]}`,
		`null`, `[]`, `"x"`, `{}`, `{"customer_name":"\u202e"}`, "{\"customer_name\":\"\xff\"}",
		`{"customer_email":"a@1.2.3.4","customer_name":"A","currency":"USD","items":[{"sku":"A","name":"B","quantity":1,"unit_price":9007199254740991}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		c, p := decodeCheckout(httptest.NewRecorder(), r)
		if p != nil {
			if p.Status < 400 || p.Status > 499 || p.Type == "" || p.Detail == "" {
				t.Fatalf("problem %+v for %q", p, body)
			}
			return
		}
		if !utf8.Valid(body) {
			t.Fatalf("invalid UTF-8 was decoded: %q", body)
		}
		if err := c.Validate(); err != nil {
			return // a 422 naming the fields
		}
		if c.CustomerEmail == "" || len(c.Items) == 0 || len(c.Items) > order.MaxItems {
			t.Fatalf("accepted %+v from %q", c, body)
		}
	})
}

// The Idempotency-Key parser never panics; a key it accepts is 1 to 255
// visible ASCII characters, and it accepts nothing else.
func FuzzIdempotencyKey(f *testing.F) {
	for _, seed := range []string{`"abc"`, "abc", `""`, "a b", strings.Repeat("k", 256), "\"\\\"", "ключ", "\x00"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", nil)
		r.Header["Idempotency-Key"] = []string{value}
		key, p := idempotencyKeyOf(r)
		if p != nil {
			if p.Status != http.StatusBadRequest {
				t.Fatalf("problem %+v for %q", p, value)
			}
			return
		}
		if key == "" || len(key) > 255 {
			t.Fatalf("accepted %q from %q", key, value)
		}
		for i := 0; i < len(key); i++ {
			if key[i] <= ' ' || key[i] >= 0x7f || key[i] == '"' || key[i] == '\\' {
				t.Fatalf("accepted %q (byte %d) from %q", key, i, value)
			}
		}
	})
}
