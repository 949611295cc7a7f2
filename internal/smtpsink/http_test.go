package smtpsink_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/smtpsink"
)

// setupHTTP starts a sink holding two messages and returns it with its handler.
func setupHTTP(t *testing.T) (*smtpsink.Server, http.Handler) {
	t.Helper()
	srv := start(t, smtpsink.Config{})
	c := dial(t, srv)
	for _, m := range []struct{ id, rcpt, toHeader, subject string }{
		{"one@sekali.test", "ann@sekali.test", "Ann <ann@sekali.test>", "First"},
		{"two@sekali.test", "bob@sekali.test", "bob@sekali.test", "Second"},
	} {
		if _, err := send(c, []string{m.rcpt}, rawMessage(m.id, m.toHeader, m.subject)); err != nil {
			t.Fatalf("send %s: %v", m.id, err)
		}
	}
	return srv, srv.Handler()
}

func get(t *testing.T, h http.Handler, path string, query url.Values) *httptest.ResponseRecorder {
	t.Helper()
	target := path
	if query != nil {
		target += "?" + query.Encode()
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d, body %q; want 200", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %q: %v", rec.Body, err)
	}
	return v
}

// mailpitSearch holds the fields of Mailpit's search reply that clients read.
type mailpitSearch struct {
	Total         int `json:"total"`
	MessagesCount int `json:"messages_count"`
	Messages      []struct {
		ID        string
		MessageID string
		Subject   string
		To        []struct{ Name, Address string }
		Created   time.Time
	} `json:"messages"`
}

func TestMailpitSearch(t *testing.T) {
	t.Parallel()
	srv, h := setupHTTP(t)

	for _, query := range []string{"message-id:one@sekali.test", `message-id:"<one@sekali.test>"`, "Message-ID:ONE@sekali.test"} {
		res := decode[mailpitSearch](t, get(t, h, "/api/v1/search", url.Values{"query": {query}}))
		if res.MessagesCount != 1 || len(res.Messages) != 1 || res.Total != 2 {
			t.Fatalf("query %q: messages_count %d, %d messages, total %d; want 1, 1, 2", query, res.MessagesCount, len(res.Messages), res.Total)
		}
		got := res.Messages[0]
		want := srv.ByMessageID("one@sekali.test")[0]
		if got.ID != want.QueueID || got.MessageID != "one@sekali.test" || got.Subject != "First" {
			t.Errorf("query %q: got ID %q, MessageID %q, Subject %q; want %q, one@sekali.test, First", query, got.ID, got.MessageID, got.Subject, want.QueueID)
		}
		if len(got.To) != 1 || got.To[0].Name != "Ann" || got.To[0].Address != "ann@sekali.test" {
			t.Errorf("query %q: To = %+v, want Ann <ann@sekali.test>", query, got.To)
		}
		if !got.Created.Equal(want.ReceivedAt) {
			t.Errorf("query %q: Created = %v, want %v", query, got.Created, want.ReceivedAt)
		}
	}

	rec := get(t, h, "/api/v1/search", url.Values{"query": {"message-id:nobody@sekali.test"}})
	if res := decode[mailpitSearch](t, rec); res.MessagesCount != 0 || res.Messages == nil || len(res.Messages) != 0 {
		t.Errorf("unknown id: messages_count %d, messages %v; want 0 and []", res.MessagesCount, res.Messages)
	}
}

// mailhogSearch holds the fields of MailHog's search reply that clients read.
type mailhogSearch struct {
	Total int `json:"total"`
	Count int `json:"count"`
	Items []struct {
		ID      string
		Content struct{ Headers map[string][]string }
	} `json:"items"`
}

func TestMailHogSearch(t *testing.T) {
	t.Parallel()
	srv, h := setupHTTP(t)

	query := url.Values{"kind": {"containing"}, "query": {"TWO@sekali.test"}}
	res := decode[mailhogSearch](t, get(t, h, "/api/v2/search", query))
	if res.Total != 1 || res.Count != 1 || len(res.Items) != 1 {
		t.Fatalf("total %d, count %d, %d items; want 1, 1, 1", res.Total, res.Count, len(res.Items))
	}
	item := res.Items[0]
	if want := srv.ByMessageID("two@sekali.test")[0].QueueID; item.ID != want {
		t.Errorf("ID = %q, want the queue id %q", item.ID, want)
	}
	if got := item.Content.Headers["Message-ID"]; len(got) != 1 || got[0] != "<two@sekali.test>" {
		t.Errorf(`Headers["Message-ID"] = %q, want [<two@sekali.test>]`, got)
	}
	if got := item.Content.Headers["Subject"]; len(got) != 1 || got[0] != "Second" {
		t.Errorf(`Headers["Subject"] = %q, want [Second]`, got)
	}

	query.Set("query", "nobody@sekali.test")
	if res := decode[mailhogSearch](t, get(t, h, "/api/v2/search", query)); res.Total != 0 || res.Items == nil || len(res.Items) != 0 {
		t.Errorf("unknown id: total %d, items %v; want 0 and []", res.Total, res.Items)
	}
}

func TestLookUpErrors(t *testing.T) {
	t.Parallel()
	_, h := setupHTTP(t)
	tests := []struct {
		name  string
		path  string
		query url.Values
		want  int
	}{
		{"Mailpit without query", "/api/v1/search", nil, http.StatusBadRequest},
		{"Mailpit unsupported term", "/api/v1/search", url.Values{"query": {"subject:First"}}, http.StatusBadRequest},
		{"Mailpit empty id", "/api/v1/search", url.Values{"query": {"message-id:"}}, http.StatusBadRequest},
		{"MailHog without query", "/api/v2/search", url.Values{"kind": {"containing"}}, http.StatusBadRequest},
		{"MailHog unsupported kind", "/api/v2/search", url.Values{"kind": {"from"}, "query": {"x"}}, http.StatusBadRequest},
		{"unknown path", "/api/v1/messages", nil, http.StatusNotFound},
		{"root", "/", nil, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if rec := get(t, h, tt.path, tt.query); rec.Code != tt.want {
				t.Errorf("GET %s?%s: status %d, want %d", tt.path, tt.query.Encode(), rec.Code, tt.want)
			}
		})
	}
}
