package resendtest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
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

// request posts body to path with the full key, an Idempotency-Key when
// idem is set, and header; it returns the status, the header fields
// and the JSON answer.
func request(t *testing.T, s *resendtest.Server, path, idem, body string, header http.Header) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+s.APIKey)
	req.Header.Set("Content-Type", "application/json")
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("answer %d is not a JSON object: %q", res.StatusCode, b)
	}
	return res.StatusCode, res.Header, v
}

// email is a valid e-mail to n@example.com, as a batch item.
func email(n int) string {
	return fmt.Sprintf(`{"from":"Shop <orders@shop.example>","to":["%d@example.com"],"subject":"Hi %d","text":"x",`+
		`"headers":{"Message-ID":"<%d@shop.example>"},"tags":[{"name":"sekali-key","value":"k%d"}]}`, n, n, n, n)
}

func batch(items ...string) string { return "[" + strings.Join(items, ",") + "]" }

var permissive = http.Header{"X-Batch-Validation": {"permissive"}}

// ids are the ids of a batch's answer, in order.
func ids(t *testing.T, v map[string]any) []string {
	t.Helper()
	data, ok := v["data"].([]any)
	if !ok {
		t.Fatalf("answer %v has no data array", v)
	}
	var out []string
	for _, d := range data {
		out = append(out, d.(map[string]any)["id"].(string))
	}
	return out
}

// The rate limit counts every request of the team (a batch is one, the
// probe one), answers beyond it 429 rate_limit_exceeded with its
// headers, and puts ratelimit-* on the answers it lets through.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	s := resendtest.NewServer()
	defer s.Close()
	s.SetRateLimit(2)
	status, h, _ := request(t, s, "/emails", "", valid, nil)
	if status != 200 || h.Get("Ratelimit-Limit") != "2" || h.Get("Ratelimit-Remaining") != "1" || h.Get("Ratelimit-Reset") != "1" || h.Get("Retry-After") != "" {
		t.Errorf("first request: %d %v, want 200 with ratelimit-limit 2, remaining 1, reset 1", status, h)
	}
	status, h, _ = request(t, s, "/emails/batch", "", batch(email(1), email(2), email(3)), nil)
	if status != 200 || h.Get("Ratelimit-Remaining") != "0" {
		t.Errorf("a batch of three: %d %v, want 200, one request: remaining 0", status, h)
	}
	status, h, v := request(t, s, "/emails", "", valid, nil)
	if status != 429 || v["name"] != "rate_limit_exceeded" || v["statusCode"] != float64(429) || h.Get("Retry-After") != "1" ||
		h.Get("Ratelimit-Remaining") != "0" || h.Get("Ratelimit-Limit") != "2" {
		t.Errorf("third request within the second: %d %v %v, want 429 rate_limit_exceeded with retry-after 1", status, h, v)
	}
	if c := s.Counts(); c.Emails != 2 || c.Batches != 1 || c.RateLimited != 1 || len(s.Messages()) != 4 {
		t.Errorf("counts %+v, %d e-mails; want 2 /emails, 1 batch, 1 refused by rate, 4 e-mails", c, len(s.Messages()))
	}
	s.SetRateLimit(0)
	if status, h, _ := request(t, s, "/emails", "", valid, nil); status != 200 || h.Get("Ratelimit-Limit") != "" {
		t.Errorf("limit lifted: %d %v, want 200 without ratelimit-*", status, h)
	}
}

// The daily quota counts e-mails, not requests: a batch that would go
// beyond it sends none of its e-mails; the next UTC day starts afresh.
func TestDailyQuota(t *testing.T) {
	t.Parallel()
	s := resendtest.NewServer()
	defer s.Close()
	day := time.Date(2026, 3, 2, 23, 59, 0, 0, time.UTC)
	var offset atomic.Int64
	s.SetNow(func() time.Time { return day.Add(time.Duration(offset.Load())) })
	s.SetDailyQuota(3)
	if status, _, _ := request(t, s, "/emails/batch", "", batch(email(1), email(2)), nil); status != 200 {
		t.Fatalf("two of three: %d", status)
	}
	status, _, v := request(t, s, "/emails/batch", "b", batch(email(3), email(4)), nil)
	if status != 429 || v["name"] != "daily_quota_exceeded" || len(s.Messages()) != 2 {
		t.Errorf("two more: %d %v, %d e-mails; want 429 daily_quota_exceeded and nothing sent", status, v, len(s.Messages()))
	}
	if status, _, _ := request(t, s, "/emails", "", valid, nil); status != 200 {
		t.Errorf("the third of the day: %d, want 200", status)
	}
	offset.Store(int64(2 * time.Minute)) // 00:01 the next day
	if status, _, _ := request(t, s, "/emails/batch", "b", batch(email(3), email(4)), nil); status != 200 {
		t.Errorf("the next UTC day, the same key (not stored when refused): %d, want 200", status)
	}
	if c := s.Counts(); c.QuotaExceeded != 1 || len(s.Messages()) != 5 {
		t.Errorf("counts %+v, %d e-mails; want 1 refused by quota, 5 sent", c, len(s.Messages()))
	}
}

// A batch answers the ids of its e-mails in order; the same key and
// body answer them again and send nothing; another body under the key,
// or the key in flight, is refused as for a single send; keys are per
// endpoint.
func TestBatch(t *testing.T) {
	t.Parallel()
	s := resendtest.NewServer()
	defer s.Close()
	body := batch(email(1), email(2), email(3))
	status, _, first := request(t, s, "/emails/batch", "batch-1", body, nil)
	got := ids(t, first)
	msgs := s.Messages()
	if status != 200 || len(got) != 3 || len(msgs) != 3 || first["errors"] != nil {
		t.Fatalf("batch of three: %d %v, %d e-mails", status, first, len(msgs))
	}
	for i, m := range msgs {
		if m.ID != got[i] || m.To[0] != fmt.Sprintf("%d@example.com", i+1) || m.Tags["sekali-key"] != fmt.Sprintf("k%d", i+1) ||
			m.MessageID != fmt.Sprintf("%d@shop.example", i+1) || !m.Batched || m.IdempotencyKey != "batch-1" {
			t.Errorf("e-mail %d: %+v, want id %s, its recipient, tag and Message-ID, under the batch's key", i, m, got[i])
		}
	}
	_, _, again := request(t, s, "/emails/batch", "batch-1", strings.ReplaceAll(body, ",", " , "), nil)
	if !slices.Equal(ids(t, again), got) || len(s.Messages()) != 3 {
		t.Errorf("the same batch again: %v, %d e-mails; want the first ids and nothing sent", again, len(s.Messages()))
	}
	status, _, v := request(t, s, "/emails/batch", "batch-1", batch(email(1), email(2)), nil)
	if status != 409 || v["name"] != "invalid_idempotent_request" {
		t.Errorf("another body under the key: %d %v, want 409 invalid_idempotent_request", status, v)
	}
	if status, _, _ := request(t, s, "/emails", "batch-1", valid, nil); status != 200 {
		t.Errorf("the batch's key on /emails: %d, want 200 (keys are per endpoint)", status)
	}

	arrived, release := s.HoldNext()
	done := make(chan int)
	go func() {
		status, _, _ := request(t, s, "/emails/batch", "batch-2", batch(email(4)), nil)
		done <- status
	}()
	<-arrived
	status, _, v = request(t, s, "/emails/batch", "batch-2", batch(email(4)), nil)
	release()
	if status != 409 || v["name"] != "concurrent_idempotent_requests" || <-done != 200 {
		t.Errorf("the key in flight: %d %v, want 409 concurrent_idempotent_requests", status, v)
	}
}

// In permissive validation the valid e-mails go and the others are
// listed by index; in strict validation (the default) one invalid e-mail
// refuses the batch. Either way the batch endpoint takes no attachments
// and at most 100 e-mails.
func TestBatchValidation(t *testing.T) {
	t.Parallel()
	s := resendtest.NewServer()
	defer s.Close()
	s.RefuseRecipients("2@example.com")
	body := batch(email(1), email(2), email(3), `{"from":"orders@shop.example","to":"4@example.com","subject":"s","text":"t","attachments":[]}`)
	status, _, v := request(t, s, "/emails/batch", "", body, nil)
	if status != 422 || v["name"] != "validation_error" || !strings.Contains(v["message"].(string), "`to`") || len(s.Messages()) != 0 {
		t.Errorf("strict, one bad recipient: %d %v, %d e-mails; want 422 about `to`, nothing sent", status, v, len(s.Messages()))
	}
	status, _, v = request(t, s, "/emails/batch", "", body, permissive)
	errs, _ := v["errors"].([]any)
	if got := ids(t, v); status != 200 || len(got) != 2 || len(errs) != 2 {
		t.Fatalf("permissive: %d %v, want 200 with two ids and two errors", status, v)
	}
	e1, e3 := errs[0].(map[string]any), errs[1].(map[string]any)
	if e1["index"] != float64(1) || !strings.Contains(e1["message"].(string), "`to`") || e3["index"] != float64(3) ||
		!strings.Contains(e3["message"].(string), "attachments") {
		t.Errorf("errors %v, want index 1 about `to` and index 3 about attachments", errs)
	}
	if msgs := s.Messages(); len(msgs) != 2 || msgs[0].To[0] != "1@example.com" || msgs[1].To[0] != "3@example.com" {
		t.Errorf("sent %+v, want 1@ and 3@", msgs)
	}
	var many []string
	for i := range resendtest.MaxBatch + 1 {
		many = append(many, email(10+i))
	}
	if status, _, v := request(t, s, "/emails/batch", "", batch(many...), nil); status != 422 || len(s.Messages()) != 2 {
		t.Errorf("strict, 101 e-mails: %d %v, want 422 and nothing sent", status, v)
	}
	if status, _, v := request(t, s, "/emails/batch", "", `{"from":"x"}`, nil); status != 400 || v["name"] != "validation_error" {
		t.Errorf("not an array: %d %v, want 400 validation_error", status, v)
	}
}

// A batch's faults are the whole batch's: an answer lost after it was
// sent leaves the key with the first answer.
func TestBatchFaults(t *testing.T) {
	t.Parallel()
	s := resendtest.NewServer()
	defer s.Close()
	body := batch(email(1), email(2))
	s.BatchFailNext(resendtest.Fault{Cut: true, Sent: true}, resendtest.Fault{Status: 500, Name: "application_error", Message: "oops"})
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/emails/batch", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.APIKey)
	req.Header.Set("Idempotency-Key", "cut")
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("cut: answered %d", res.StatusCode)
	}
	if n := len(s.Messages()); n != 2 {
		t.Fatalf("%d e-mails after the cut, want the whole batch", n)
	}
	status, _, v := request(t, s, "/emails/batch", "cut", body, nil)
	if got := ids(t, v); status != 200 || len(got) != 2 || got[0] != s.Messages()[0].ID || len(s.Messages()) != 2 {
		t.Errorf("resent under the key: %d %v, want the first ids, nothing sent", status, v)
	}
	if status, _, v := request(t, s, "/emails/batch", "other", body, nil); status != 500 || v["name"] != "application_error" || len(s.Messages()) != 2 {
		t.Errorf("the queued 500: %d %v", status, v)
	}
	if c := s.Counts(); c.Batches != 3 || c.Emails != 0 {
		t.Errorf("counts %+v, want 3 batches", c)
	}
}
