package resendtest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/resend/resendtest"
)

func post(t *testing.T, s *resendtest.Server, key, idem, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/emails", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("answer %d is not JSON: %q", res.StatusCode, b)
	}
	return res.StatusCode, v
}

const valid = `{"from":"Shop <orders@shop.example>","to":"budi@example.com","subject":"Hi","text":"x"}`

// The server refuses what Resend refuses, with Resend's error shape.
func TestRefusesWhatResendRefuses(t *testing.T) {
	t.Parallel()
	s := resendtest.NewServer()
	defer s.Close()
	cases := []struct {
		key, idem, body string
		status          int
		name            string
	}{
		{"", "", valid, 401, "missing_api_key"},
		{"re_nope", "", valid, 401, "validation_error"},
		{s.APIKey, strings.Repeat("k", 257), valid, 400, "invalid_idempotency_key"},
		{s.APIKey, "", `[1]`, 400, "validation_error"},
		{s.APIKey, "", `{"to":"budi@example.com","subject":"Hi","text":"x"}`, 422, "missing_required_field"},
		{s.APIKey, "", `{"from":"orders@shop.example","to":"budi","subject":"Hi","text":"x"}`, 422, "validation_error"},
		{s.APIKey, "", `{"from":"orders@shop.example","to":"budi@example.com","subject":"Hi"}`, 422, "missing_required_field"},
		{s.APIKey, "", `{"from":"orders@shop.example","to":"budi@example.com","subject":"Hi","text":"x","headers":{"X":1}}`, 422, "validation_error"},
		{s.APIKey, "", `{"from":"orders@shop.example","to":"budi@example.com","subject":"Hi","text":"x","tags":[{"name":"a b","value":"c"}]}`, 422, "validation_error"},
	}
	for _, c := range cases {
		status, v := post(t, s, c.key, c.idem, c.body)
		if status != c.status || v["name"] != c.name || v["statusCode"] != float64(c.status) || v["message"] == "" {
			t.Errorf("%s: %d %v, want %d %s", c.body, status, v, c.status, c.name)
		}
	}
	if n := len(s.Messages()); n != 0 {
		t.Errorf("%d e-mails sent", n)
	}
}

// A key is kept for 24 hours; after that the same request sends again.
func TestKeysExpire(t *testing.T) {
	t.Parallel()
	s := resendtest.NewServer()
	defer s.Close()
	var offset atomic.Int64
	s.SetNow(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	_, first := post(t, s, s.APIKey, "k1", valid)
	_, again := post(t, s, s.APIKey, "k1", strings.Replace(valid, `"text":"x"`, ` "text" : "x" `, 1)) // same JSON, other spacing
	if first["id"] == nil || again["id"] != first["id"] || s.CountByIdempotencyKey("k1") != 1 {
		t.Fatalf("same key within 24h: %v then %v, %d e-mails; want the first answer and one e-mail", first, again, s.CountByIdempotencyKey("k1"))
	}
	offset.Store(int64(25 * time.Hour))
	_, later := post(t, s, s.APIKey, "k1", valid)
	if later["id"] == first["id"] || s.CountByIdempotencyKey("k1") != 2 {
		t.Errorf("same key after 25h: %v, %d e-mails; want a new send", later, s.CountByIdempotencyKey("k1"))
	}
}
