package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sekali-dev/sekali/internal/resend/resendtest"
)

// The provider-bound mode (-provider resend): in production the
// bottleneck is not this machine but the provider's rate limit (issue
// 33). The stack runs as in the CPU-bound bench, its workers sending
// through Resend's HTTP API to a stand-in (internal/resend/resendtest,
// in this process) that allows -provider-rate requests a second in all
// and answers 429 with Resend's headers beyond; -orders checkouts are
// placed at once, and the report says how long until all were sent, the
// pace the workers kept against the limit, the share of requests the
// stand-in refused, the e-mails a request carried, and what did not end
// sent once. Once for each -provider-batches setting.

// placeClients is how many checkouts the provider-bound mode places at
// once: a flash sale's shoppers, not a rate.
const placeClients = 8

// parseBatches reads -provider-batches: PROVIDER_BATCHES settings to run
// with, "off", "on" or both, in the order given.
func parseBatches(v string) ([]string, error) {
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		s = strings.TrimSpace(s)
		if s != "on" && s != "off" {
			return nil, fmt.Errorf("-provider-batches %q: want on, off, or both (off,on)", v)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// providerRun is what one provider-bound run measured.
type providerRun struct {
	batches          string        // PROVIDER_BATCHES
	orders           int           // placed, each answered 201
	placed           time.Duration // placing them all
	allSent          time.Duration // from the first checkout to the last e-mail at the stand-in
	requests         int           // the requests its rate limit counted
	refused          int           // of them, answered 429 rate_limit_exceeded
	admitted         int           // the others
	span             time.Duration // from the first admitted to the last
	emails, maxBatch int           // e-mails at the stand-in; the most one request carried
	failed, held     int           // deliveries that ended so
	duplicates       int           // e-mails beyond the first for one Message-ID
}

// pace is the admitted requests a second over their span as a share of
// limit: n requests evenly spaced at the limit span (n-1)/limit. Zero
// when fewer than two were admitted: no span to measure.
func (r providerRun) pace(limit int) float64 {
	if r.admitted < 2 || r.span <= 0 || limit <= 0 {
		return 0
	}
	return float64(r.admitted-1) / r.span.Seconds() / float64(limit)
}

func (r providerRun) refusedShare() float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(r.refused) / float64(r.requests)
}

func (r providerRun) perRequest() float64 {
	if r.admitted == 0 {
		return 0
	}
	return float64(r.emails) / float64(r.admitted)
}

// measure reads the run's numbers off the stand-in's arrivals and
// messages, from the first checkout at start.
func (r *providerRun) measure(arrivals []resendtest.Arrival, msgs []resendtest.Message, start time.Time) {
	var first, last time.Time
	for _, a := range arrivals {
		r.requests++
		if a.Refused {
			r.refused++
			continue
		}
		r.admitted++
		if first.IsZero() {
			first = a.At
		}
		last = a.At
	}
	r.span = last.Sub(first)
	r.emails = len(msgs)
	perID, perBatch := map[string]int{}, map[string]int{}
	var lastSent time.Time
	for _, m := range msgs {
		perID[m.MessageID]++
		key := m.IdempotencyKey
		if !m.Batched {
			key = "lone " + m.MessageID
		}
		perBatch[key]++
		if m.SentAt.After(lastSent) {
			lastSent = m.SentAt
		}
	}
	for _, n := range perID {
		r.duplicates += n - 1
	}
	for _, n := range perBatch {
		r.maxBatch = max(r.maxBatch, n)
	}
	if !lastSent.IsZero() {
		r.allSent = lastSent.Sub(start)
	}
}

// runProvider is the provider-bound mode: one run for each
// -provider-batches setting, then the report.
func (b *bench) runProvider(ctx context.Context) (string, error) {
	var runs []providerRun
	for _, batches := range b.o.providerBatches {
		b.logf("provider-bound: %d orders, %d workers, Resend at %d/s, PROVIDER_BATCHES=%s", b.o.orders, b.o.workers, b.o.providerRate, batches)
		r, err := b.providerRun(ctx, batches)
		if err != nil {
			return "", err
		}
		b.logf("  all sent in %.1f s, pace %.0f%% of the limit, %d of %d requests refused", r.allSent.Seconds(), 100*r.pace(b.o.providerRate), r.refused, r.requests)
		runs = append(runs, r)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "## Provider-bound run of %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&out, "%d cores, %s; %d checkouts placed at once (%d at a time) through the API; %d worker processes (WORKER_CONCURRENCY %d) sending through Resend's API to a stand-in that allows %d requests a second in all (a sliding window) and answers 429 with its headers beyond; RESEND_RATE %d.\n\n",
		runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH, b.o.orders, placeClients, b.o.workers, b.o.concurrency, b.o.providerRate, b.o.providerRate)
	providerTable(&out, b.o.providerRate, runs)
	return out.String(), nil
}

// providerTable writes the runs as a Markdown table, one row each.
func providerTable(w *strings.Builder, limit int, runs []providerRun) {
	w.WriteString("| PROVIDER_BATCHES | orders | placed in | all sent in | requests | refused (429) | pace (admitted/s over their span, of the limit) | e-mails a request (most) | failed | held | duplicates |\n")
	w.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range runs {
		fmt.Fprintf(w, "| %s | %d | %.1f s | %.1f s | %d | %d (%.1f%%) | %.2f/s (%.0f%%) | %.1f (%d) | %d | %d | %d |\n",
			r.batches, r.orders, r.placed.Seconds(), r.allSent.Seconds(), r.requests, r.refused, 100*r.refusedShare(),
			r.pace(limit)*float64(limit), 100*r.pace(limit), r.perRequest(), r.maxBatch, r.failed, r.held, r.duplicates)
	}
}

// providerRun deploys sekali with its workers sending through a fresh
// rate-limited Resend stand-in, places the orders, waits until every
// delivery has ended, and measures.
func (b *bench) providerRun(ctx context.Context, batches string) (providerRun, error) {
	r := providerRun{batches: batches}
	rs := resendtest.NewServer()
	defer rs.Close()
	rs.SetRateLimit(b.o.providerRate)
	rate := strconv.Itoa(b.o.providerRate)
	d, err := b.deploy(ctx, sekali, &mailSetup{
		worker: map[string]string{"PROVIDER": "resend", "RESEND_API_KEY": rs.APIKey, "RESEND_BASE_URL": rs.URL,
			"RESEND_RATE": rate, "PROVIDER_BATCHES": batches},
		reconciler: map[string]string{"PROVIDER": "resend", "MAIL_LOOKUP_URL": ""},
	})
	if err != nil {
		return r, err
	}
	defer d.stop()

	start := time.Now()
	var mu sync.Mutex
	errs := map[string]int{}
	var wg sync.WaitGroup
	next := make(chan struct{})
	for range placeClients {
		wg.Go(func() {
			for range next {
				if failure := b.checkout(d); failure != "" {
					mu.Lock()
					errs[failure]++
					mu.Unlock()
				}
			}
		})
	}
	for range b.o.orders {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	r.placed = time.Since(start)
	if len(errs) > 0 {
		return r, fmt.Errorf("checkouts refused%s", kinds(errs))
	}
	r.orders = b.o.orders

	// Until every delivery has ended: at the limit, one request an
	// e-mail, orders/rate seconds; three times that and two minutes more
	// before giving up.
	limit := time.Duration(3*float64(b.o.orders)/float64(b.o.providerRate)*float64(time.Second)) + 2*time.Minute
	for {
		var open int
		if err := d.pool.QueryRow(ctx, sekali.openSQL).Scan(&open); err != nil {
			return r, err
		}
		if open == 0 {
			break
		}
		if time.Since(start) > limit {
			return r, fmt.Errorf("%d deliveries still open %v after the first checkout", open, limit)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return r, err
		}
	}
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'held')
		FROM notification_deliveries`).Scan(&r.failed, &r.held); err != nil {
		return r, err
	}
	r.measure(rs.Arrivals(), rs.Messages(), start)
	return r, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// checkProvider checks the provider-bound mode's flags, batches being
// -provider-batches, and sets o.providerBatches.
func (o *options) checkProvider(batches string) error {
	var err error
	if o.providerBatches, err = parseBatches(batches); err != nil {
		return err
	}
	switch {
	case o.provider == "":
		return nil
	case o.provider != "resend":
		return fmt.Errorf("-provider %q: the provider-bound mode has a stand-in for resend only", o.provider)
	case o.providerRate < 1:
		return fmt.Errorf("-provider-rate %d: want at least 1 request a second", o.providerRate)
	case o.orders < 1:
		return fmt.Errorf("-orders %d: want at least 1", o.orders)
	case o.workers < 1:
		return fmt.Errorf("-workers %d: want at least 1", o.workers)
	}
	return nil
}
