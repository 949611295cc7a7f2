package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/httpapi"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/notify/notifytest"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/pace"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/roster"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/webhookout"
	"github.com/sekali-dev/sekali/internal/worker"
	"github.com/sekali-dev/sekali/internal/worker/workertest"
)

const adminToken = "test-admin-token-0123456789"

// unsubscribeSecret signs the stack's one-click unsubscribe links.
const unsubscribeSecret = "test-unsubscribe-secret-0123456789abcdef"

// stack is the API wired as cmd/api wires it, on a private database and
// queue, served over a real loopback connection.
type stack struct {
	url       string
	db        testenv.DB
	redis     testenv.Redis
	inspector *asynq.Inspector
	reg       *prometheus.Registry
	logs      *testenv.Buffer
	keys      *apikey.Service
	templates *mailtemplate.Templates
	f         *notifytest.Factory // deliveries in any state, through the service's statements
	// backendKey has every scope of the backend's (not admin); do sends it unless the request sets its
	// own Authorization (even an empty one, for none). backendKeyID is its
	// id.
	backendKey   string
	backendKeyID uuid.UUID
	// handler is the API itself, for tests that call it without a
	// connection (the fuzz test, whose inputs no client could send
	// otherwise, and which must stay cheap per request).
	handler http.Handler
}

type setupOpts struct {
	redis       asynq.RedisConnOpt      // overrides the queue's Redis, e.g. with an unreachable one
	tracer      trace.TracerProvider    // records the API's spans
	rateLimits  httpapi.RateLimits      // none by default
	templates   *mailtemplate.Templates // the built-in ones by default
	webhooks    roster.Webhooks         // opened over the stack's operator, as cmd/api opens them; none by default
	maxInFlight int                     // no bound by default
	bodyTimeout time.Duration           // none by default
	public      *order.PublicRules      // CHECKOUT_MODE=public with these rules; keyed by default
}

func setup(t testing.TB, opts ...setupOpts) stack {
	t.Helper()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	queueRedis := rd.Opt
	var o setupOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.redis != nil {
		queueRedis = o.redis
	}
	var tracer trace.Tracer
	if o.tracer != nil {
		tracer = o.tracer.Tracer("test")
	}

	logs := &testenv.Buffer{}
	log := slog.New(httpapi.LogHandler(slog.NewJSONHandler(logs, nil)))
	queueRedisClient := redisconn.NewClient(queueRedis)
	t.Cleanup(func() { queueRedisClient.Close() })
	inspector := asynq.NewInspector(rd.Opt)
	t.Cleanup(func() { inspector.Close() })

	templates, err := mailtemplate.LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	if o.templates != nil {
		templates = o.templates
	}
	reg := prometheus.NewRegistry()
	enq := queue.NewEnqueuer(queueRedisClient, rd.Queue, log, reg)
	orders := order.NewService(db.Pool, enq, templates, 24*time.Hour, reg)
	orders.Public = o.public
	checks := []httpapi.Check{
		{Name: "postgres", Ping: db.Pool.Ping},
		{Name: "redis", Ping: func(ctx context.Context) error { return queueRedisClient.Ping(ctx).Err() }},
	}
	rdb := redisconn.NewClient(rd.Opt)
	t.Cleanup(func() { rdb.Close() })
	keys := apikey.NewService(db.Pool)
	backend, backendKey, err := keys.Create(context.Background(), "test", "test backend", apikey.BackendScopes)
	if err != nil {
		t.Fatal(err)
	}
	operator := notify.NewOperator(db.Pool, enq, inspector, rdb)
	handler := httpapi.NewServer(httpapi.Deps{
		Log: log, Orders: orders, Templates: templates, Checks: checks, Registry: reg, Tracer: tracer,
		Keys: keys, RateLimits: o.rateLimits, Webhooks: o.webhooks.Open(mail.WebhookDeps{Tokens: operator, Log: log}), MaxInFlight: o.maxInFlight,
		BodyTimeout: o.bodyTimeout, UnsubscribeSecret: unsubscribeSecret,
		Admin: httpapi.Admin{Token: adminToken, Ops: operator, Keys: keys,
			Webhooks: webhookout.NewService(db.Pool, &webhookout.Guard{AllowHTTP: true, Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})},
	})
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	f := notifytest.New(t, db.Pool)
	f.Templates = templates // its hand-overs record what a worker's do
	return stack{url: srv.URL, f: f, db: db, redis: rd, inspector: inspector, reg: reg, logs: logs, keys: keys, templates: templates,
		backendKey: backendKey, backendKeyID: backend.ID, handler: handler}
}

// bare is the API with nothing behind it: no database, no Redis, no
// worker. For the tests of what the HTTP layer answers by itself —
// routing, methods, HEAD, pages rendered from the templates — which
// must not wait on services they never reach. templates are the
// built-in ones when nil.
func bare(t *testing.T, templates *mailtemplate.Templates) stack {
	t.Helper()
	if templates == nil {
		var err error
		if templates, err = mailtemplate.LoadBuiltin(); err != nil {
			t.Fatal(err)
		}
	}
	logs := &testenv.Buffer{}
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Deps{
		Log: slog.New(httpapi.LogHandler(slog.NewJSONHandler(logs, nil))), Templates: templates, Registry: reg,
	}))
	t.Cleanup(srv.Close)
	return stack{url: srv.URL, reg: reg, logs: logs, templates: templates}
}

// startWorker runs a worker on the stack's queue, as cmd/worker does,
// that sends through SMTP to the sink it returns; tracer (nil for none)
// records its spans.
func (s stack) startWorker(t *testing.T, tracer trace.Tracer) *smtpsink.Server {
	t.Helper()
	return s.startWorkerTo(t, tracer, smtpsink.Config{})
}

// startWorkerTo is startWorker with a sink that behaves as sinkCfg says.
func (s stack) startWorkerTo(t *testing.T, tracer trace.Tracer, sinkCfg smtpsink.Config) *smtpsink.Server {
	t.Helper()
	return s.startPacedWorker(t, tracer, sinkCfg, nil)
}

// startPacedWorker is startWorkerTo with its provider paced by budget
// (nil: unpaced), as cmd/worker paces a provider with <NAME>_RATE.
func (s stack) startPacedWorker(t *testing.T, tracer trace.Tracer, sinkCfg smtpsink.Config, budget *pace.Budget) *smtpsink.Server {
	t.Helper()
	sink, err := smtpsink.Start(sinkCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	provider, err := smtp.New(smtp.Config{Host: sink.Host(), Port: sink.Port(), TLS: smtp.TLSNone,
		From: "orders@shop.example", IdempotencyHeader: "Idempotency-Key", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(provider.Close)
	rdb := redisconn.NewClient(s.redis.Opt)
	t.Cleanup(func() { rdb.Close() })
	w := worker.New(s.db.Pool, rdb, []worker.NamedProvider{{Name: "smtp", Provider: provider, Budget: budget}}, s.templates, worker.Config{
		LockTTL: 10 * time.Second, MaxAge: time.Hour, ProbeInterval: time.Second, SendTimeout: 10 * time.Second, MessageIDDomain: "shop.example",
		WorkerID: "test-worker", Queue: s.redis.Queue, Concurrency: 2, Tracer: tracer,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), worker.NewMetrics(prometheus.NewRegistry()))
	workertest.Serve(t, w, worker.ServerConfig{Redis: s.redis.Opt})
	return sink
}

// response is what a request got back.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func (s stack) do(t *testing.T, method, path, contentType string, body io.Reader, header map[string]string) response {
	t.Helper()
	res, err := s.send(method, path, contentType, body, header)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// send is do for goroutines other than the test's own, which must not
// call t.Fatal: it returns the error instead.
func (s stack) send(method, path, contentType string, body io.Reader, header map[string]string) (response, error) {
	req, err := http.NewRequest(method, s.url+path, body)
	if err != nil {
		return response{}, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+s.backendKey)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if req.Header.Get("Authorization") == "" {
		req.Header.Del("Authorization")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}, nil
}

func (s stack) postOrder(t *testing.T, body string, header map[string]string) response {
	t.Helper()
	return s.do(t, http.MethodPost, "/v1/orders", "application/json", strings.NewReader(body), header)
}

// count returns the number of rows in table.
func (s stack) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := s.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (s stack) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return testenv.Metric(t, s.reg, name, labels...)
}
