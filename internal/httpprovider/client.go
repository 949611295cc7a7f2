package httpprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
)

// maxAnswer caps what is read of an answer.
const maxAnswer = 1 << 20

// DefaultTimeout is a request's bound when NewClient is given none.
const DefaultTimeout = 30 * time.Second

// Client makes one provider's API requests.
type Client struct {
	base     string
	header   http.Header
	timeout  time.Duration
	accepted func(status int) bool
	http     *http.Client
}

// NewClient returns a Client for the API at base, a URL BaseURL returned,
// that sends header (the provider's credentials) with every request and
// gives each at most timeout (DefaultTimeout when zero), which dialling
// and the TLS handshake get too. accepted tells the statuses with which
// the provider answers a request it took: such an answer cut short is
// ambiguous.
func NewClient(base string, header http.Header, timeout time.Duration, accepted func(status int) bool) *Client {
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return &Client{base: base, header: header, timeout: timeout, accepted: accepted, http: &http.Client{Transport: newTransport(timeout)}}
}

// newTransport is the connection pool of a provider's client: dialling
// and the TLS handshake bounded by timeout.
func newTransport(timeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ExpectContinueTimeout: time.Second,
	}
}

// Refused is se, a provider's classified error answer ans to a message's
// request (HandOver), marked as what it is: handed over, carrying the
// answer's header fields (a throttled request's retry-after and
// ratelimit-*, which internal/pace reads), and, for a server error
// (5xx), an answer after the request was written whole, which says
// nothing certain about what the provider did with the message: it may
// have taken it (mail.SendError.MayHaveAccepted). Such an answer is at
// the data stage and says so, whatever the provider's classification
// makes of it (Resend's: unavailable, since a retry under its key cannot
// send twice; the others': ambiguous).
func Refused(se *mail.SendError, ans Answer) *mail.SendError {
	se.HandedOver = true
	se.Header = ans.Header
	if se.Reply.Protocol == mail.ProtocolHTTP && se.Reply.Code >= 500 {
		se.Stage = mail.StageData
		se.Err = fmt.Errorf("%w (answered after the request was written whole: the provider may have taken the message)", se.Err)
	}
	return se
}

// Close closes idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Answer is a provider's answer, its body read up to 1 MiB.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// HandOver sends the request of a delivery: handOver (the worker's last
// lease check) runs right before it goes out, and the request's
// deadline is the client's timeout counted from before handOver, never
// extended. A refused hand-over is mail.OutcomeAborted and sends
// nothing; every other error is Do's, with HandedOver set. An answer,
// whatever its status, is told to ctx's mail.AnswerObserver.
func (c *Client) HandOver(ctx context.Context, handOver func() error, method, target string, header http.Header, body []byte) (Answer, *mail.SendError) {
	before := time.Now()
	if err := handOver(); err != nil {
		return Answer{}, &mail.SendError{Outcome: mail.OutcomeAborted, Stage: mail.StageData, Err: err}
	}
	ctx, cancel := context.WithDeadline(ctx, before.Add(c.timeout))
	defer cancel()
	ans, se := c.do(ctx, method, target, header, body)
	if se != nil {
		se.HandedOver = true
	} else {
		mail.ObserveAnswer(ctx, ans.Status, ans.Header)
	}
	return ans, se
}

// PostJSON hands over a POST of v as JSON to target (HandOver), with
// header (nil: none) besides its Content-Type. A v that does not marshal
// is ComposeError's, and nothing is sent.
func (c *Client) PostJSON(ctx context.Context, handOver func() error, target string, header http.Header, v any) (Answer, *mail.SendError) {
	body, err := json.Marshal(v)
	if err != nil {
		return Answer{}, ComposeError(err)
	}
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	return c.HandOver(ctx, handOver, http.MethodPost, target, h, body)
}

// Do runs one request that sends no message (a probe, a search), for at
// most the client's timeout. target is a path under the base URL (it
// may carry a query) or a full URL, such as a paging link, which must
// be on the base URL (its scheme and host, a path under its path): it
// gets the credentials, so any other is refused, unsent
// (mail.OutcomeUnavailable). A failure without an answer is
// classified by whether the whole request was written: before that
// nothing can have been accepted (mail.OutcomeUnavailable), after it
// the provider may have it (mail.OutcomeAmbiguous). An answer is
// returned whatever its status.
func (c *Client) Do(ctx context.Context, method, target string, header http.Header, body []byte) (Answer, *mail.SendError) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.do(ctx, method, target, header, body)
}

// Probe runs a provider's probe (mail.Provider.Probe): GET target,
// which sends nothing, for at most the client's timeout. An answer with
// a status the provider takes requests with passes; any other is
// refused the provider's way (refused: its classification of the
// answer, or nil for one that passes after all, as Resend's refusal of a
// sending-only key), and unavailable whatever that says: what a probe is
// answered is about us, never about a message.
func (c *Client) Probe(ctx context.Context, target string, refused func(ans Answer) *mail.SendError) error {
	ans, se := c.Do(ctx, http.MethodGet, target, nil, nil)
	if se != nil {
		return se
	}
	if c.accepted(ans.Status) {
		return nil
	}
	if se = refused(ans); se == nil {
		return nil
	}
	se.Outcome, se.Header = mail.OutcomeUnavailable, ans.Header
	return se
}

// errWritten: net/http asked for the body again, to send a request
// whose answer was lost once more on its own (see do).
var errWritten = errors.New("the request was written and its answer lost; not sent again")

// errFenced: the request's deadline passed before its body went out.
var errFenced = errors.New("deadline passed before the request body was sent")

// fencedBody hands out the request body only before its deadline, so
// that a worker that stalls after its last lease check cannot start
// sending the message once the reconciler may act on its expired lease.
type fencedBody struct {
	r        *bytes.Reader
	deadline time.Time
}

func (b *fencedBody) Read(p []byte) (int, error) {
	if !time.Now().Before(b.deadline) {
		return 0, errFenced
	}
	return b.r.Read(p)
}

func (b *fencedBody) Close() error { return nil }

// do runs one request within ctx's deadline (see Do).
func (c *Client) do(ctx context.Context, method, target string, header http.Header, body []byte) (Answer, *mail.SendError) {
	if !strings.HasPrefix(target, "http") {
		target = c.base + target
	} else if err := c.onBase(target); err != nil {
		return Answer{}, &mail.SendError{Outcome: mail.OutcomeUnavailable, Stage: mail.StageConnect, Err: err}
	}
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				wrote.Store(true)
			}
		},
	})
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return Answer{}, &mail.SendError{Outcome: mail.OutcomeUnavailable, Stage: mail.StageConnect, Err: err}
	}
	if body != nil {
		deadline, _ := ctx.Deadline()
		req.Body = &fencedBody{r: bytes.NewReader(body), deadline: deadline}
		// net/http rewinds the body to send the request again on a fresh
		// connection when a kept one was closed under it: safe before
		// anything was written, and that retry is kept. After it was
		// written, it would also send a request it deems replayable — a
		// POST with an Idempotency-Key — whose answer was lost, on its
		// own: the provider would see a second copy (Resend refuses it,
		// 409 concurrent_idempotent_requests, while the first is in
		// flight, and that refusal would hide the first's lost answer).
		// Refused: the caller learns the answer was lost.
		req.GetBody = func() (io.ReadCloser, error) {
			if wrote.Load() {
				return nil, errWritten
			}
			return &fencedBody{r: bytes.NewReader(body), deadline: deadline}, nil
		}
		req.ContentLength = int64(len(body))
	}
	for k, v := range header {
		req.Header[k] = v
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "sekali")
	res, err := c.http.Do(req)
	if err != nil {
		if wrote.Load() {
			return Answer{}, &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData,
				Err: fmt.Errorf("no answer after the request was sent: %w", err)}
		}
		return Answer{}, &mail.SendError{Outcome: mail.OutcomeUnavailable, Stage: mail.StageConnect,
			Err: fmt.Errorf("request not sent: %w", err)}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil && c.accepted(res.StatusCode) {
		return Answer{}, &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Reply: mail.HTTPStatus(res.StatusCode),
			Err: fmt.Errorf("answer %d cut short: %w", res.StatusCode, err)}
	}
	return Answer{Status: res.StatusCode, Header: res.Header, Body: b}, nil
}

// onBase checks that target, a full URL, is on the base URL: the same
// scheme and host, and a path under the base's. Only such a target gets
// the credentials.
func (c *Client) onBase(target string) error {
	base, err := url.Parse(c.base)
	if err != nil {
		return fmt.Errorf("base URL %q: %w", c.base, err)
	}
	u, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("target %q: %w", target, err)
	}
	p := path.Clean("/" + u.Path)
	if u.Scheme != base.Scheme || !strings.EqualFold(u.Host, base.Host) || u.User != nil ||
		(base.Path != "" && p != base.Path && !strings.HasPrefix(p, base.Path+"/")) {
		return fmt.Errorf("target %q leaves %s", target, c.base)
	}
	return nil
}
