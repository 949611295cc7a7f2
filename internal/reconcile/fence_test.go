package reconcile_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/reconcile"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// gate holds the searches of a look-up in flight: each announces itself
// on asked, then waits for open to be closed before the sink answers it.
type gate struct {
	asked chan struct{}
	open  chan struct{}
}

// gatedLookup is the sink's Mailpit API, searched through smtp's
// look-up, with every search held at a gate.
func (e *env) gatedLookup(t *testing.T) (mail.Lookup, *gate) {
	t.Helper()
	g := &gate{asked: make(chan struct{}, 16), open: make(chan struct{})}
	sink := e.sink.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/search" {
			g.asked <- struct{}{}
			select {
			case <-g.open:
			case <-r.Context().Done():
				return
			}
		}
		sink.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	l, err := smtp.NewLookup(context.Background(), smtp.APIMailpit, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return l, g
}

// waitAsked waits for n searches to be in flight.
func (g *gate) waitAsked(t *testing.T, n int, what string) {
	t.Helper()
	for i := range n {
		select {
		case <-g.asked:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: %d of %d look-ups reached the provider", what, i, n)
		}
	}
}

// runOnce runs a pass of r in the background; its report and error
// arrive on the channel.
func runOnce(r *reconcile.Reconciler) <-chan passResult {
	done := make(chan passResult, 1)
	go func() {
		rep, err := r.RunOnce(context.Background())
		done <- passResult{rep, err}
	}()
	return done
}

type passResult struct {
	rep reconcile.Report
	err error
}

// While the reconciler waits for the provider's answer, it holds no
// transaction open and no lock on the row: a worker, an operator and the
// other reconcilers go on as if it were not there.
func TestNoTransactionIsOpenWhileTheProviderIsAsked(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	ctx := context.Background()
	l, g := e.gatedLookup(t)
	d := e.pending(t, "asked@example.com")
	e.strand(t, d, true)
	done := runOnce(e.reconciler(t, recOpts{lookup: l}))
	g.waitAsked(t, 1, "the stranded row")

	var open []string
	rows, err := e.db.Pool.Query(ctx, `SELECT state || ': ' || coalesce(query, '') FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'`)
	if err != nil {
		t.Fatal(err)
	}
	if open, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(open) > 0 {
		t.Errorf("while the look-up is in flight, connections of the reconciler's database are in a transaction: %q", open)
	}
	// The row is free: taken at once, NOWAIT, and let go (rolled back).
	err = pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT 1 FROM notification_deliveries WHERE id = $1 FOR UPDATE NOWAIT", d.ID)
		return err
	})
	if err != nil {
		t.Errorf("while the look-up is in flight, the row is locked: %v", err)
	}

	close(g.open)
	res := <-done
	if res.err != nil || res.rep.Decisions[reconcile.DecisionNotFound] != 1 {
		t.Errorf("the pass: %v, %v; want the row not found at the provider", res.rep, res.err)
	}
}

// A worker that was frozen past its lease and wakes up with the
// provider's acceptance records it while the reconciler is still asking
// (the row is not locked), and the reconciler's decision, made on the row
// as it was, is not written over it: the worker's "sent" stands, and no
// second e-mail is queued.
func TestALateWorkersOutcomeIsNotOverwritten(t *testing.T) {
	t.Parallel()
	e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
	ctx := context.Background()
	l, g := e.gatedLookup(t)
	d := e.pending(t, "late@example.com")
	a := e.f.HandedOver(d, 39*time.Second)
	e.f.Aged(a.Delivery, 40*time.Second) // its lease ran out a second ago
	done := runOnce(e.reconciler(t, recOpts{lookup: l}))
	g.waitAsked(t, 1, "the stranded row")

	// The worker's own statement, under its (expired) lease; the search
	// will not show the message yet.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	marked, err := dbsqlc.New(e.db.Pool).CompleteDeliveries(wctx, dbsqlc.CompleteDeliveriesParams{
		Ids: []uuid.UUID{d.ID}, LeaseTokens: []uuid.UUID{a.Lease}, Outcomes: []string{"sent"}, Reasons: []string{""}, Refunds: []bool{false},
		Pins: []bool{false}, ProviderMessageIds: []string{"late-250"}, Languages: []string{"en"}, Providers: []string{""}, Async: true,
		LeaseSeconds: 30, Actor: "frozen-worker",
	})
	if err != nil || len(marked) != 1 {
		t.Fatalf("the late worker's sent while the reconciler asks: %d rows, %v; want it recorded at once", len(marked), err)
	}

	close(g.open)
	res := <-done
	if res.err != nil || res.rep.Decisions[reconcile.DecisionChanged] != 1 || res.rep.Decisions[reconcile.DecisionNotFound] != 0 {
		t.Errorf("the pass: %v, %v; want its decision left unwritten, the row having changed", res.rep, res.err)
	}
	if got := e.get(t, d.ID); got.Status != notify.StatusSent || got.ProviderMessageID != "late-250" {
		t.Errorf("row %s with provider id %q, want sent as the worker recorded it", got.Status, got.ProviderMessageID)
	}
	if evs := events(t, e, d, "reconciled"); len(evs) != 0 {
		t.Errorf("history has the reconciler's decision over the worker's sent: %+v", evs)
	}
	if _, err := e.inspector.GetTaskInfo(e.redis.Queue, queue.TaskID(d.ID)); err == nil {
		t.Error("a task was queued for a delivery its worker recorded sent")
	}
}

// Two reconcilers that read the same row both ask the provider (neither
// holds the row while it waits), and both try to write their decision:
// one write takes effect, the other finds the row changed and writes
// nothing. Each pass makes one decision about the row, and the history
// has one.
func TestTwoReconcilersAskingAboutOneRowWriteOnce(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		accepted bool // the provider has the message
		decision string
		status   notify.Status
	}{
		{"found", true, reconcile.DecisionFound, notify.StatusSent},
		{"not found", false, reconcile.DecisionNotFound, notify.StatusPending},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, testenv.NewRedis(t), smtpsink.Config{})
			l, g := e.gatedLookup(t)
			d := e.pending(t, "raced@example.com")
			if tt.accepted {
				e.deliverToSink(t, d)
			}
			e.strand(t, d, true)

			first, second := runOnce(e.reconciler(t, recOpts{lookup: l})), runOnce(e.reconciler(t, recOpts{lookup: l}))
			g.waitAsked(t, 2, "both reconcilers") // both read the row and asked: the race is on
			close(g.open)
			decisions := map[string]int{}
			for _, done := range []<-chan passResult{first, second} {
				res := <-done
				if res.err != nil {
					t.Fatal(res.err)
				}
				n := 0
				for decision, c := range res.rep.Decisions {
					decisions[decision] += c
					n += c
				}
				if n != 1 {
					t.Errorf("a pass made %d decisions about the one row: %v", n, res.rep)
				}
			}
			if decisions[tt.decision] != 1 || decisions[reconcile.DecisionChanged] != 1 {
				t.Errorf("decisions %v, want one %s and one %s", decisions, tt.decision, reconcile.DecisionChanged)
			}
			if evs := events(t, e, d, "reconciled"); len(evs) != 1 {
				t.Errorf("history has %d reconciled events, want 1: %+v", len(evs), evs)
			}
			if got := e.get(t, d.ID); got.Status != tt.status {
				t.Errorf("row %s, want %s", got.Status, tt.status)
			}
		})
	}
}
