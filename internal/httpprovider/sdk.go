package httpprovider

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
)

// SDKClient is the HTTP client to give a provider's SDK (the AWS SDK's
// HTTPClient, for SES) so that its requests keep Client's rules, which
// the SDK would not: a request that carries a message runs its
// Exchange's hand-over right before it goes out, its deadline counts
// from before that hand-over, its body is handed to the connection only
// before that deadline, and whether it was written whole is recorded
// for the classification of a failure without an answer; its answer is
// told to the context's mail.AnswerObserver. The SDK must
// not retry on its own: a second request after one written whole could
// be a second e-mail.
type SDKClient struct {
	timeout time.Duration
	http    *http.Client
}

// NewSDKClient returns an SDKClient whose requests get at most timeout
// (DefaultTimeout when zero), dialling and the TLS handshake included.
func NewSDKClient(timeout time.Duration) *SDKClient {
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return &SDKClient{timeout: timeout, http: &http.Client{Transport: newTransport(timeout)}}
}

// Close closes idle connections.
func (c *SDKClient) Close() { c.http.CloseIdleConnections() }

// Exchange is one send's request, as SDKClient saw it.
type Exchange struct {
	handOver   func() error
	handedOver atomic.Bool // handOver was called (whatever it answered)
	refused    atomic.Pointer[error]
	wrote      atomic.Bool // the request went out whole
}

type exchangeKey struct{}

// WithHandOver returns a context whose request through an SDKClient
// runs handOver (the worker's last lease check) right before it goes
// out, and the Exchange that records how far it got.
func WithHandOver(ctx context.Context, handOver func() error) (context.Context, *Exchange) {
	ex := &Exchange{handOver: handOver}
	return context.WithValue(ctx, exchangeKey{}, ex), ex
}

// HandedOver reports whether the hand-over ran, whatever it answered.
func (e *Exchange) HandedOver() bool { return e.handedOver.Load() }

// Refused is the hand-over's error, nil if it passed or never ran: then
// nothing went out.
func (e *Exchange) Refused() error {
	if p := e.refused.Load(); p != nil {
		return *p
	}
	return nil
}

// Wrote reports whether the request went out whole: after that, a
// failure without an answer is ambiguous.
func (e *Exchange) Wrote() bool { return e.wrote.Load() }

// errSecondRequest: an SDK tried a message's request again, which
// SDKClient never lets out.
var errSecondRequest = errors.New("a second request for the same message (an SDK retry); refused unsent")

// Do implements the SDK's HTTP client.
func (c *SDKClient) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	ex, _ := ctx.Value(exchangeKey{}).(*Exchange)
	var cancel context.CancelFunc
	if ex == nil {
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
	} else {
		if ex.handedOver.Swap(true) {
			return nil, errSecondRequest
		}
		before := time.Now()
		if err := ex.handOver(); err != nil {
			ex.refused.Store(&err)
			return nil, err
		}
		ctx, cancel = context.WithDeadline(ctx, before.Add(c.timeout))
	}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil && ex != nil {
				ex.wrote.Store(true)
			}
		},
	})
	req = req.WithContext(ctx)
	if req.Body != nil && req.Body != http.NoBody {
		deadline, _ := ctx.Deadline()
		req.Body = &fencedReader{r: req.Body, deadline: deadline}
		req.GetBody = nil // never sent twice
	}
	res, err := c.http.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if ex != nil {
		mail.ObserveAnswer(ctx, res.StatusCode, res.Header)
	}
	res.Body = &cancelOnClose{ReadCloser: res.Body, cancel: cancel}
	return res, nil
}

// fencedReader is fencedBody over the SDK's body.
type fencedReader struct {
	r        io.ReadCloser
	deadline time.Time
}

func (b *fencedReader) Read(p []byte) (int, error) {
	if !time.Now().Before(b.deadline) {
		return 0, errFenced
	}
	return b.r.Read(p)
}

func (b *fencedReader) Close() error { return b.r.Close() }

// cancelOnClose ends a request's context once its answer has been read.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
