package reconcile_test

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/notify/notifytest"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/reconcile"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
	"github.com/sekali-dev/sekali/internal/worker/workertest"
)

const mailDomain = "shop.example"

type env struct {
	db        testenv.DB
	redis     testenv.Redis
	sink      *smtpsink.Server
	lookupURL string
	orders    *order.Service // its enqueues fail: the API died before enqueueing
	enq       *queue.Enqueuer
	inspector *asynq.Inspector
	logs      *testenv.Buffer
	f         *notifytest.Factory // deliveries in any state, through the service's statements
}

func setup(t *testing.T, rd testenv.Redis, sinkCfg smtpsink.Config) *env {
	t.Helper()
	e := &env{db: testenv.NewDB(t), redis: rd, logs: &testenv.Buffer{}}
	e.f = notifytest.New(t, e.db.Pool)
	e.f.Domain = mailDomain
	sink, err := smtpsink.Start(sinkCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	e.sink = sink
	api := httptest.NewServer(sink.Handler())
	t.Cleanup(api.Close)
	e.lookupURL = api.URL

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rdb := redisconn.NewClient(rd.Opt)
	t.Cleanup(func() { rdb.Close() })
	e.enq = queue.NewEnqueuer(rdb, rd.Queue, quiet, prometheus.NewRegistry())
	e.inspector = asynq.NewInspector(rd.Opt)
	t.Cleanup(func() { e.inspector.Close() })
	dead := redisconn.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { dead.Close() })
	reg := prometheus.NewRegistry()
	e.orders = order.NewService(e.db.Pool, queue.NewEnqueuer(dead, rd.Queue, quiet, reg), nil, time.Hour, reg)
	return e
}

type recOpts struct {
	providers []reconcile.Provider // failover's list, instead of lookup and dedup
	lookup    mail.Lookup
	policy    reconcile.Policy
	policies  map[string]reconcile.Policy
	retention time.Duration
	dedup     time.Duration
	// pendingAfter is PENDING_REENQUEUE_AFTER: a minute unless set.
	pendingAfter time.Duration
	maxAge       time.Duration // DELIVERY_MAX_AGE; none unless set
}

func (e *env) reconciler(t *testing.T, o recOpts) *reconcile.Reconciler {
	t.Helper()
	if o.policy == "" {
		o.policy = reconcile.PolicyHold
	}
	if o.providers == nil {
		o.providers = []reconcile.Provider{{Name: "smtp", Lookup: o.lookup, DedupWindow: o.dedup}}
	}
	return reconcile.New(e.db.Pool, e.enq, e.inspector, reconcile.Config{
		PendingAfter: cmp.Or(o.pendingAfter, time.Minute), Batch: 50, DefaultPolicy: o.policy, Policies: o.policies,
		MessageIDDomain: mailDomain, Actor: "reconciler-" + uuid.NewString()[:8], DeliveryRetention: o.retention,
		Providers: o.providers, MaxAge: o.maxAge,
	}, slog.New(slog.NewJSONHandler(e.logs, nil)), prometheus.NewRegistry())
}

func (e *env) lookup(t *testing.T, api string) mail.Lookup {
	t.Helper()
	l, err := smtp.NewLookup(context.Background(), api, e.lookupURL)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startWorker runs the real worker as an asynq server on the test's queue.
func (e *env) startWorker(t *testing.T) {
	t.Helper()
	templates, err := mailtemplate.LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	p, err := smtp.New(smtp.Config{Host: e.sink.Host(), Port: e.sink.Port(), TLS: smtp.TLSNone,
		From: "orders@" + mailDomain, IdempotencyHeader: "Idempotency-Key", Timeout: 5 * time.Second, MaxIdle: 4})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redisconn.NewClient(e.redis.Opt)
	w := worker.New(e.db.Pool, rdb, worker.Only("smtp", p), templates, worker.Config{
		LockTTL: 5 * time.Second, MaxAge: time.Hour, ProbeInterval: time.Second, SendTimeout: 10 * time.Second, MessageIDDomain: mailDomain, WorkerID: "test-worker", Queue: e.redis.Queue, Concurrency: 4,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), worker.NewMetrics(prometheus.NewRegistry()))
	t.Cleanup(func() {
		p.Close()
		rdb.Close()
	})
	workertest.Serve(t, w, worker.ServerConfig{Redis: e.redis.Opt, DelayedTaskCheckInterval: 200 * time.Millisecond, RetryBase: 100 * time.Millisecond})
}

// pending places an order whose task never reached the queue.
func (e *env) pending(t *testing.T, email string) notify.Delivery {
	t.Helper()
	price := int64(1000)
	o, err := e.orders.Place(context.Background(), order.Checkout{
		CustomerEmail: email, CustomerName: "Tono", Currency: "EUR",
		Items: []order.CheckoutItem{{SKU: "BOOK", Name: "Buku", Quantity: 1, UnitPrice: &price}},
	}, order.Caller{}, "")
	if err != nil {
		t.Fatal(err)
	}
	return e.get(t, o.Notifications[0].ID)
}

func (e *env) get(t *testing.T, id uuid.UUID) notify.Delivery {
	t.Helper()
	d, err := notify.Get(context.Background(), e.db.Pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (e *env) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// age makes pending rows look untouched for two minutes: those touched
// less than two minutes ago are aged by two minutes.
func (e *env) age(t *testing.T) {
	t.Helper()
	rows, err := e.db.Pool.Query(context.Background(),
		"SELECT id FROM notification_deliveries WHERE status = 'pending' AND updated_at > now() - interval '2 minutes'")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids { // a worker may be claiming them meanwhile
		e.f.AgedWhile(notify.Delivery{ID: id}, notify.StatusPending, 2*time.Minute)
	}
}

// strand leaves d as a dead worker would: sending, its lease expired a
// second ago, and handed over 40 seconds ago or not at all.
func (e *env) strand(t *testing.T, d notify.Delivery, handedOver bool) {
	t.Helper()
	if !handedOver {
		e.f.Claimed(d, -time.Second)
		return
	}
	e.f.Aged(e.f.HandedOver(d, 39*time.Second).Delivery, 40*time.Second)
}

// deliverToSink sends d's message to the sink the way a worker would
// have before it died.
func (e *env) deliverToSink(t *testing.T, d notify.Delivery) {
	t.Helper()
	p, err := smtp.New(smtp.Config{Host: e.sink.Host(), Port: e.sink.Port(), TLS: smtp.TLSNone,
		From: "orders@" + mailDomain, IdempotencyHeader: "Idempotency-Key", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(context.Background(), mail.Message{To: d.Recipient, Subject: "s", Text: "t",
		MessageID: mail.MessageID(d.IdempotencyKey, mailDomain), IdempotencyKey: d.IdempotencyKey}, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func (e *env) allSent(t *testing.T, ds ...notify.Delivery) func() bool {
	return func() bool {
		for _, d := range ds {
			if e.get(t, d.ID).Status != notify.StatusSent {
				return false
			}
		}
		return true
	}
}

// exactlyOnce checks that each delivery's recipient got one message.
func (e *env) exactlyOnce(t *testing.T, ds ...notify.Delivery) {
	t.Helper()
	for _, d := range ds {
		if n := len(e.sink.ByRecipient(d.Recipient)); n != 1 {
			t.Errorf("%s got %d e-mails, want 1", d.Recipient, n)
		}
	}
	if n := e.sink.Count(); n != len(ds) {
		t.Errorf("%d e-mails at the sink for %d deliveries", n, len(ds))
	}
}

func events(t *testing.T, e *env, d notify.Delivery, name string) []notify.Event {
	t.Helper()
	all, err := notify.History(context.Background(), e.db.Pool, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out []notify.Event
	for _, ev := range all {
		if ev.Event == name {
			out = append(out, ev)
		}
	}
	return out
}

// Every decision's series exists before the first pass, at zero, so that
// SekaliProviderLookupFailing (a rate of lookup_failed) fires on the
// first failure.
func TestDecisionSeriesExistFromTheStart(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reconcile.New(nil, nil, nil, reconcile.Config{}, slog.New(slog.DiscardHandler), reg)
	for _, d := range []string{reconcile.DecisionLookupFailed, reconcile.DecisionPolicyHold, reconcile.DecisionRequeued, reconcile.DecisionFound} {
		if !testenv.HasSeries(t, reg, "sekali_reconciler_decisions_total", "decision", d) {
			t.Errorf("sekali_reconciler_decisions_total{decision=%q} is missing before any pass", d)
		}
	}
	if !testenv.HasSeries(t, reg, "sekali_cleanup_deleted_total", "table", "notification_deliveries") {
		t.Error("sekali_cleanup_deleted_total{table=notification_deliveries} is missing before any clean-up")
	}
}

// With a provider that deduplicates by the delivery's key (Resend), an
// ambiguous send is sent again without a look-up while the provider still
// remembers the key; after that window, the template's policy decides.
func TestProviderDedupWindowResendsAmbiguousSends(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	r := e.reconciler(t, recOpts{dedup: time.Hour, policy: reconcile.PolicyHold})
	recent, old := e.pending(t, "recent@example.com"), e.pending(t, "old@example.com")
	e.strand(t, recent, true)
	e.strand(t, old, true)
	e.f.Aged(old, 2*time.Hour)
	rep, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decisions[reconcile.DecisionDedupResend] != 1 || rep.Decisions[reconcile.DecisionPolicyHold] != 1 {
		t.Errorf("decisions %v, want one resend within the window and one hold past it", rep.Decisions)
	}
	if got := e.get(t, recent.ID); got.Status != notify.StatusPending {
		t.Errorf("within the window: %s", got.Status)
	}
	if got := e.get(t, old.ID); got.Status != notify.StatusHeld {
		t.Errorf("past the window: %s", got.Status)
	}
}

// The window counts from the earliest attempt whose outcome is unknown,
// not the latest: an ambiguous send sent again under the key, whose
// second attempt is ambiguous too, is not sent a third time once the
// first is past the window, since the first may be the one the provider
// took and it forgets the key from then on.
func TestProviderDedupWindowCountsFromTheEarliestUnknownAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	r := e.reconciler(t, recOpts{dedup: time.Hour, policy: reconcile.PolicyHold})
	d := e.pending(t, "twice-unknown@example.com")
	e.strand(t, d, true)
	e.f.Aged(d, 50*time.Minute)
	if rep, err := r.RunOnce(context.Background()); err != nil || rep.Decisions[reconcile.DecisionDedupResend] != 1 {
		t.Fatalf("first unknown attempt, 50 minutes old: %v, %v; want sent again under the key", rep.Decisions, err)
	}
	e.strand(t, e.get(t, d.ID), true) // the second attempt: unknown too
	e.f.Aged(d, 30*time.Minute)       // the first was handed over 80 minutes ago
	rep, err := r.RunOnce(context.Background())
	if err != nil || rep.Decisions[reconcile.DecisionPolicyHold] != 1 {
		t.Errorf("second unknown attempt, the first 80 minutes old: %v, %v; want held by policy, not sent a third time", rep.Decisions, err)
	}
	if got := e.get(t, d.ID); got.Status != notify.StatusHeld {
		t.Errorf("%s, want held", got.Status)
	}
}

// With failover, each ambiguous send is settled at the provider its
// hand-over went to, the way that provider allows; one handed over
// before providers were recorded, at the first of the list. A send
// again under a provider's key pins the delivery to that provider; a
// look-up that settles "not sent" frees it for any.
func TestEachSendIsSettledAtItsOwnProvider(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	// The template policy is resend: only the unknown provider's hold
	// tells "held because nobody can ask it" from the policy.
	r := e.reconciler(t, recOpts{policy: reconcile.PolicyResend, providers: []reconcile.Provider{
		{Name: "resend", DedupWindow: time.Hour},
		{Name: "smtp", Lookup: e.lookup(t, smtp.APIMailpit)},
	}})
	atResend, atRelay, unrecorded := e.pending(t, "resend@example.com"), e.pending(t, "relay@example.com"), e.pending(t, "old@example.com")
	dropped := e.pending(t, "dropped@example.com") // handed to a provider since taken out of the list
	// Pinned to the relay by an earlier unknown outcome, retried by an
	// operator who kept the pin, handed over there again and lost.
	pinnedAtRelay := e.f.Retried(e.f.HeldAt(e.pending(t, "pinned@example.com"), "smtp"), false)
	for d, provider := range map[*notify.Delivery]string{&atResend: "resend", &atRelay: "smtp", &unrecorded: "", &dropped: "postmark", &pinnedAtRelay: "smtp"} {
		e.f.Aged(e.f.HandedOverTo(*d, 39*time.Second, provider).Delivery, 40*time.Second)
	}
	rep, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decisions[reconcile.DecisionDedupResend] != 2 || rep.Decisions[reconcile.DecisionNotFound] != 2 || rep.Decisions[reconcile.DecisionPolicyHold] != 1 {
		t.Errorf("decisions %v, want two sent again under Resend's key, two not found at the relay, one held", rep.Decisions)
	}
	// A miss does not lift a pin: the earlier attempt may lie outside
	// what the search covers.
	if got := e.get(t, pinnedAtRelay.ID); got.Status != notify.StatusPending || got.Provider != "smtp" || !got.ProviderPinned {
		t.Errorf("pinned, then not found: %s at %q pinned %v, want pending, still pinned to smtp", got.Status, got.Provider, got.ProviderPinned)
	}
	if got := e.get(t, dropped.ID); got.Status != notify.StatusHeld || got.Provider != "postmark" || !got.ProviderPinned {
		t.Errorf("handed to a provider the reconciler does not know: %s at %q pinned %v, want held, pinned to postmark", got.Status, got.Provider, got.ProviderPinned)
	}
	for _, c := range []struct {
		d        notify.Delivery
		provider string
		pinned   bool
	}{{atResend, "resend", true}, {unrecorded, "resend", true}, {atRelay, "smtp", false}} {
		got := e.get(t, c.d.ID)
		if got.Status != notify.StatusPending || got.Provider != c.provider || got.ProviderPinned != c.pinned {
			t.Errorf("%s: %s at %q pinned %v, want pending at %q pinned %v", got.Recipient, got.Status, got.Provider, got.ProviderPinned, c.provider, c.pinned)
		}
		events, err := notify.History(context.Background(), e.db.Pool, c.d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if last := events[len(events)-1]; last.Event != "reconciled" || !strings.Contains(string(last.Detail), `"provider": "`+c.provider+`"`) {
			t.Errorf("%s: last event %s %s, want reconciled at %s", got.Recipient, last.Event, last.Detail, c.provider)
		}
	}
}

// A suppression or an expiry that comes while an attempt's outcome is
// unknown (its answer lost) waits for the provider's answer, which the
// reconciler asks for: the worker meanwhile neither suppresses nor
// expires it, nor sends it again. Taken, it is sent; not taken, it goes
// back to pending on that evidence and the worker suppresses it; at a
// provider nothing can ask, it is held. Never suppressed or failed
// while the provider has it.
func TestASuppressionOrExpiryDuringALostAnswerWaitsForTheProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	e.startWorker(t)
	r := e.reconciler(t, recOpts{maxAge: time.Hour, providers: []reconcile.Provider{
		{Name: "smtp", Lookup: e.lookup(t, smtp.APIMailpit)},
		{Name: "resend", DedupWindow: time.Hour}, // no look-up
	}})
	taken, notTaken, old := e.pending(t, "taken@example.com"), e.pending(t, "not-taken@example.com"), e.pending(t, "old@example.com")
	unaskable := e.pending(t, "unaskable@example.com")
	for _, d := range []*notify.Delivery{&taken, &notTaken, &old} {
		*d = e.f.MaybeAccepted(*d, "smtp") // a 5xx after the data: pending, pinned, in doubt
	}
	unaskable = e.f.MaybeAccepted(unaskable, "resend")
	e.deliverToSink(t, taken)
	e.deliverToSink(t, old)
	for _, d := range []notify.Delivery{taken, notTaken, unaskable} {
		if _, err := dbsqlc.New(e.db.Pool).AddSuppression(ctx, dbsqlc.AddSuppressionParams{
			Recipient: d.Recipient, Source: "operator", Reason: "complaint from customer", Actor: "operator:Ana"}); err != nil {
			t.Fatal(err)
		}
	}
	old = e.f.Aged(old, 2*time.Hour)

	// The worker, given their tasks, leaves all four as they are.
	for _, d := range []notify.Delivery{taken, notTaken, old, unaskable} {
		if _, err := e.enq.EnsureQueued(ctx, e.inspector, d, false); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, "the worker to finish their four tasks", 10*time.Second, func() bool {
		info, err := e.inspector.GetQueueInfo(e.redis.Queue)
		return err == nil && info.Processed >= 4 && info.Pending+info.Active+info.Scheduled+info.Retry == 0
	})
	for _, d := range []notify.Delivery{taken, notTaken, old, unaskable} {
		if got := e.get(t, d.ID); got.Status != notify.StatusPending || !got.MayHaveBeenSent() {
			t.Fatalf("%s before the reconciler: %s, may have been sent %v; want left pending, in doubt", d.Recipient, got.Status, got.MayHaveBeenSent())
		}
	}

	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decisions[reconcile.DecisionFound] != 2 || rep.Decisions[reconcile.DecisionNotFound] != 1 || rep.Decisions[reconcile.DecisionHeldBackUnknown] != 1 {
		t.Errorf("decisions %v, want two found, one not found, one held", rep.Decisions)
	}
	for _, c := range []struct {
		d    notify.Delivery
		want notify.Status
	}{{taken, notify.StatusSent}, {old, notify.StatusSent}, {unaskable, notify.StatusHeld}} {
		if got := e.get(t, c.d.ID); got.Status != c.want {
			t.Errorf("%s: %s (%s), want %s", c.d.Recipient, got.Status, got.LastError, c.want)
		}
	}
	// Not taken: settled on the look-up's word, then suppressed by the
	// worker, and never sent.
	testenv.WaitFor(t, "the worker to suppress what was not taken", 10*time.Second, func() bool { return e.get(t, notTaken.ID).Status == notify.StatusSuppressed })
	if got := e.get(t, notTaken.ID); got.SettledBy != string(notify.EvidenceLookup) || got.MayHaveBeenSent() {
		t.Errorf("not taken: settled by %q, may have been sent %v; want settled by the look-up", got.SettledBy, got.MayHaveBeenSent())
	}
	if n := len(e.sink.ByRecipient(notTaken.Recipient)); n != 0 {
		t.Errorf("not taken: %d messages at the sink, want none", n)
	}
	for _, d := range []notify.Delivery{taken, old} {
		if n := len(e.sink.ByRecipient(d.Recipient)); n != 1 {
			t.Errorf("%s: %d messages at the sink, want the one the provider had", d.Recipient, n)
		}
	}
}
