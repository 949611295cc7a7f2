package httpprovider_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

func TestBaseURL(t *testing.T) {
	t.Parallel()
	const def = "https://api.provider.example"
	for raw, want := range map[string]string{
		"":                                 def,
		"https://api.eu.provider.example/": "https://api.eu.provider.example",
		"https://api.provider.example/v1":  "https://api.provider.example/v1",
		"http://127.0.0.1:8025":            "http://127.0.0.1:8025",
		"http://[::1]:8025/":               "http://[::1]:8025",
		"http://localhost:8025":            "http://localhost:8025",
	} {
		if got, err := httpprovider.BaseURL(raw, def); err != nil || got != want {
			t.Errorf("BaseURL(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for raw, want := range map[string]string{
		"http://api.provider.example":            "plain http only for loopback",
		"http://10.0.0.1:8025":                   "plain http only for loopback",
		"ftp://api.provider.example":             "want an https URL",
		"api.provider.example":                   "want an URL such as " + def,
		"https://":                               "want an URL such as " + def,
		"https://api.provider.example?region=eu": "want an URL such as " + def,
		"https://api.provider.example#eu":        "want an URL such as " + def,
	} {
		if got, err := httpprovider.BaseURL(raw, def); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("BaseURL(%q) = %q, %v; want an error saying %q", raw, got, err, want)
		}
	}
}

// server is a provider's API that counts the requests it gets and
// answers each with handle.
type server struct {
	*httptest.Server
	requests atomic.Int64
}

func newServer(t *testing.T, handle http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		handle(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func ok200(status int) bool { return status == http.StatusOK }

func client(t *testing.T, s *server, timeout time.Duration) *httpprovider.Client {
	t.Helper()
	c := httpprovider.NewClient(s.URL, http.Header{"X-Key": {"secret"}}, timeout, ok200)
	t.Cleanup(c.Close)
	return c
}

func pass() error { return nil }

// hangUp reads the whole request, then closes the connection without an
// answer: the provider has the message, the client does not know.
func hangUp(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

var body = []byte(`{"to":"budi@example.com"}`)

func TestRequestCarriesCredentialsAndBody(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(r.Method + " " + r.URL.RequestURI() + " " + r.Header.Get("X-Key") + " " + r.Header.Get("Content-Type") + " " +
			r.Header.Get("Accept") + " " + r.Header.Get("User-Agent") + " " + string(b))
		_, _ = io.WriteString(w, `{"id":"1"}`)
	})
	c := client(t, s, 5*time.Second)
	ans, se := c.HandOver(context.Background(), pass, http.MethodPost, "/emails", http.Header{"Content-Type": {"application/json"}}, body)
	if se != nil || ans.Status != 200 || string(ans.Body) != `{"id":"1"}` {
		t.Fatalf("HandOver = %+v, %v", ans, se)
	}
	if want := "POST /emails secret application/json application/json sekali " + string(body); got.Load() != want {
		t.Errorf("the server got %q, want %q", got.Load(), want)
	}
	// A full URL on the API's host (a paging link) is taken as it is.
	if _, se := c.Do(context.Background(), http.MethodGet, s.URL+"/events/page-2?x=1", nil, nil); se != nil {
		t.Fatal(se)
	}
	if want := "GET /events/page-2?x=1 secret  application/json sekali "; got.Load() != want {
		t.Errorf("paging: the server got %q, want %q", got.Load(), want)
	}
}

// A full URL off the base URL (another host or scheme, a path outside
// the base's) would carry the credentials elsewhere: it is refused,
// unsent, whoever passes it.
func TestFullURLOffTheBaseIsRefused(t *testing.T) {
	t.Parallel()
	var keys atomic.Int64
	other := newServer(t, func(_ http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Key") != "" {
			keys.Add(1)
		}
	})
	s := newServer(t, func(_ http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Key") != "" {
			keys.Add(1)
		}
	})
	c := httpprovider.NewClient(s.URL+"/v1", http.Header{"X-Key": {"secret"}}, 5*time.Second, ok200)
	t.Cleanup(c.Close)
	host := strings.TrimPrefix(s.URL, "http://")
	for _, target := range []string{
		other.URL + "/v1/events/page-2",
		"https://" + host + "/v1/events/page-2",
		"http://user@" + host + "/v1/events/page-2",
		s.URL + "/v2/events",
		s.URL + "/v1x/events",
		s.URL + "/v1/../v2/events",
		s.URL,
	} {
		_, se := c.Do(context.Background(), http.MethodGet, target, nil, nil)
		if se == nil || se.Outcome != mail.OutcomeUnavailable || !strings.Contains(se.Error(), "leaves") {
			t.Errorf("Do(%q) = %v, want it refused as unavailable", target, se)
		}
		_, se = c.HandOver(context.Background(), pass, http.MethodPost, target, nil, body)
		if se == nil || se.Outcome != mail.OutcomeUnavailable || !strings.Contains(se.Error(), "leaves") {
			t.Errorf("HandOver(%q) = %v, want it refused as unavailable", target, se)
		}
	}
	if n := other.requests.Load() + s.requests.Load(); n != 0 {
		t.Errorf("%d requests went out, %d with the credentials; want none", n, keys.Load())
	}
	// On the base URL, a full URL is taken.
	if _, se := c.Do(context.Background(), http.MethodGet, s.URL+"/v1/events/page-2", nil, nil); se != nil {
		t.Fatal(se)
	}
	if n := keys.Load(); n != 1 {
		t.Errorf("%d requests with the credentials, want the one on the base URL", n)
	}
}

// A refused hand-over (the lease is lost) sends nothing.
func TestHandOverRefusedSendsNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(http.ResponseWriter, *http.Request) {})
	lost := errors.New("lease lost")
	_, se := client(t, s, 5*time.Second).HandOver(context.Background(), func() error { return lost }, http.MethodPost, "/emails", nil, body)
	if se == nil || se.Outcome != mail.OutcomeAborted || se.HandedOver || !errors.Is(se, lost) {
		t.Errorf("refused hand-over: %v, want aborted, not handed over, wrapping the refusal", se)
	}
	if n := s.requests.Load(); n != 0 {
		t.Errorf("%d requests reached the server, want 0", n)
	}
}

// The deadline counts from before the hand-over: a worker that stalls
// in it past the timeout sends nothing, and the send is unavailable,
// not ambiguous.
func TestStallInHandOverSendsNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(http.ResponseWriter, *http.Request) {})
	stall := func() error { time.Sleep(200 * time.Millisecond); return nil }
	_, se := client(t, s, 100*time.Millisecond).HandOver(context.Background(), stall, http.MethodPost, "/emails", nil, body)
	if se == nil || se.Outcome != mail.OutcomeUnavailable || se.Stage != mail.StageConnect || !se.HandedOver {
		t.Errorf("stalled past the deadline: %v, want unavailable at connect, handed over", se)
	}
	if n := s.requests.Load(); n != 0 {
		t.Errorf("%d requests reached the server, want 0", n)
	}
}

// Nothing was written: the provider cannot have the message.
func TestNoAnswerBeforeTheRequestWasWrittenIsUnavailable(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(http.ResponseWriter, *http.Request) {})
	c := client(t, s, 5*time.Second)
	s.Close()
	_, se := c.HandOver(context.Background(), pass, http.MethodPost, "/emails", nil, body)
	if se == nil || se.Outcome != mail.OutcomeUnavailable || se.Stage != mail.StageConnect || !se.HandedOver {
		t.Errorf("connection refused: %v, want unavailable at connect, handed over", se)
	}
	if _, se := c.Do(context.Background(), http.MethodGet, "/server", nil, nil); se == nil || se.Outcome != mail.OutcomeUnavailable {
		t.Errorf("probe of a closed server: %v, want unavailable", se)
	}
}

// The whole request was written and no answer came: the provider may
// have the message.
func TestNoAnswerAfterTheRequestWasWrittenIsAmbiguous(t *testing.T) {
	t.Parallel()
	s := newServer(t, hangUp)
	_, se := client(t, s, 5*time.Second).HandOver(context.Background(), pass, http.MethodPost, "/emails", nil, body)
	if se == nil || se.Outcome != mail.OutcomeAmbiguous || se.Stage != mail.StageData || !se.HandedOver {
		t.Errorf("cut after the request: %v, want ambiguous at data, handed over", se)
	}
}

func TestNoAnswerInTimeIsAmbiguous(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := newServer(t, func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	_, se := client(t, s, 200*time.Millisecond).HandOver(context.Background(), pass, http.MethodPost, "/emails", nil, body)
	if se == nil || se.Outcome != mail.OutcomeAmbiguous || !se.HandedOver {
		t.Errorf("no answer within the timeout: %v, want ambiguous, handed over", se)
	}
}

// An answer that says the provider took the request, cut short, is
// ambiguous; any other is returned with what arrived of it.
func TestAnswerCutShort(t *testing.T) {
	t.Parallel()
	var status atomic.Value
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "HTTP/1.1 "+status.Load().(string)+"\r\nContent-Length: 100\r\n\r\n{\"id\":")
	})
	c := client(t, s, 5*time.Second)
	status.Store("200 OK")
	_, se := c.HandOver(context.Background(), pass, http.MethodPost, "/emails", nil, body)
	if se == nil || se.Outcome != mail.OutcomeAmbiguous || se.Reply.Code != 200 || !se.HandedOver {
		t.Errorf("200 cut short: %v, want ambiguous, code 200, handed over", se)
	}
	status.Store("500 Internal Server Error")
	ans, se := c.HandOver(context.Background(), pass, http.MethodPost, "/emails", nil, body)
	if se != nil || ans.Status != 500 || string(ans.Body) != `{"id":` {
		t.Errorf("500 cut short: %+v, %v; want the answer as it came", ans, se)
	}
}

// An error answer's header fields reach the classified error, so that
// the worker's budget reads a 429's retry-after and ratelimit-*.
func TestRefusedCarriesTheAnswersHeader(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "3")
		w.Header().Set("Ratelimit-Remaining", "0")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	ans, se := client(t, s, 5*time.Second).HandOver(context.Background(), pass, http.MethodPost, "/emails", nil, body)
	if se != nil || ans.Status != http.StatusTooManyRequests || ans.Header.Get("Retry-After") != "3" {
		t.Fatalf("HandOver = %+v, %v; want the 429 with its header", ans, se)
	}
	got := httpprovider.Refused(&mail.SendError{Outcome: mail.OutcomeThrottled, Reply: mail.HTTPStatus(ans.Status)}, ans)
	if !got.HandedOver || got.Header.Get("Retry-After") != "3" || got.Header.Get("Ratelimit-Remaining") != "0" || got.MayHaveAccepted() {
		t.Errorf("Refused = %+v, want handed over, with the answer's header, not taken", got)
	}
}

// A request with an Idempotency-Key whose answer is lost on a kept-alive
// connection is not sent again by net/http on its own (it would, for a
// request it deems replayable: the header makes a POST so): the provider
// sees it once, and the caller learns its answer was lost — ambiguous,
// for the caller to settle (Resend's key, a look-up), never a second copy
// whose refusal (409 concurrent_idempotent_requests) would hide the
// first. A request that was not written at all is still retried on a
// fresh connection: that sends nothing twice.
func TestALostAnswerIsNotSentAgainByNetHTTP(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if n.Add(1) == 2 {
			hangUp(w, r)
		}
	})
	c := client(t, s, 5*time.Second)
	key := http.Header{"Idempotency-Key": {"sekali-1"}}
	if _, se := c.HandOver(context.Background(), pass, http.MethodPost, "/emails", key, body); se != nil {
		t.Fatal(se) // the connection is now kept alive
	}
	_, se := c.HandOver(context.Background(), pass, http.MethodPost, "/emails", key, body)
	if se == nil || se.Outcome != mail.OutcomeAmbiguous {
		t.Errorf("answer lost on a kept connection: %v, want ambiguous", se)
	}
	if got := n.Load(); got != 2 {
		t.Errorf("the server saw %d requests, want 2: the one whose answer was lost was sent again", got)
	}
}
