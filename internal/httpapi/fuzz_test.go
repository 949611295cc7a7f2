package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sekali-dev/sekali/internal/order"
)

// The checkout decoder and validator never panic, and whatever they let
// through is a checkout the service can record: every answer is either a
// checkout that validates or a 4xx problem naming what is wrong. No body
// it decodes has two keys in one object that encoding/json takes for one
// field. make test runs this briefly; make fuzz runs it longer.
func FuzzCheckoutBody(f *testing.F) {
	for _, seed := range []string{
		`{"customer_email":"ana@example.com","customer_name":"Ana","currency":"IDR","items":[{"sku":"A","name":"B","quantity":1,"unit_price":1}]}`,
		`{"customer_email":"a@b.co","customer_email":"c@d.co"}`,
		`{"items":[{"sku":"A","sku":"B"}]}`,
		`{"customer_email":"a@b.co","CUSTOMER_EMAIL":"c@d.co"}`,
		`{"items":[{"sku":"A","\u017fku":"B"}]}`,
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
		if a, b, ok := foldedRepeat(body); ok {
			t.Fatalf("decoded %q with keys %q and %q in one object", body, a, b)
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

// foldedRepeat finds two keys of one object in the JSON value raw that
// bytes.EqualFold, as encoding/json does when it matches a key to a
// field, takes for one: an oracle for repeatedKey that shares none of its
// code. Malformed JSON has none.
func foldedRepeat(raw []byte) (string, string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var a, b string
	var walk func() (found bool, err error)
	walk = func() (bool, error) {
		tok, err := dec.Token()
		if err != nil {
			return false, err
		}
		switch tok {
		case json.Delim('{'):
			var keys []string
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return false, err
				}
				k, _ := kt.(string)
				for _, prior := range keys {
					if bytes.EqualFold([]byte(prior), []byte(k)) {
						a, b = prior, k
						return true, nil
					}
				}
				keys = append(keys, k)
				if found, err := walk(); found || err != nil {
					return found, err
				}
			}
			_, err = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if found, err := walk(); found || err != nil {
					return found, err
				}
			}
			_, err = dec.Token()
		}
		return false, err
	}
	found, _ := walk()
	return a, b, found
}
