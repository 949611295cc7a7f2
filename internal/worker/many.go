package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/queue"
)

// A task of many deliveries (queue.ParseTask) pays asynq's per-task
// costs once for them all. Each delivery is an attempt of its own, as if
// its task carried it alone (processOne: its own slot of the
// concurrency, lock, claim, lease, pace and history, and its own log
// line), run beside the others, so that the statements on the way
// (internal/smartbatch) take them together. A delivery that must come back (a
// lock busy, a pause, a deferral) comes back in a task of its own after
// its own wait: the task itself is done once each delivery is done or
// requeued.

// processMany runs the attempts of ps, then requeues the deliveries that
// must come back. Only when one cannot be requeued does the task fail,
// to run again whole: its deliveries that are done are found done (the
// cache, the claim) and cost no e-mail.
func (w *Worker) processMany(ctx context.Context, l *taskLog, ps []queue.Payload) error {
	l.many = true
	l.set(slog.Int("deliveries", len(ps)))
	errs := make([]error, len(ps))
	t := newTally(len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		ml := l.member(i)
		wg.Go(func() {
			start := time.Now()
			on := &onItsWay{t: t}
			defer on.arrived() // finished without a send
			mctx := context.WithValue(context.WithValue(ctx, taskLogKey{}, ml), tallyKey{}, on)
			errs[i] = w.processOne(mctx, ml, p)
			w.logLine(mctx, ml, "delivery attempt", errs[i], time.Since(start))
		})
	}
	wg.Wait()

	on, _ := asynq.GetQueueName(ctx)
	if on == "" {
		on = w.cfg.Queue
	}
	retry, _ := asynq.GetRetryCount(ctx)
	var requeued, dropped int
	var failed []error
	for i, err := range errs {
		switch {
		case err == nil:
			continue
		case errors.Is(err, asynq.SkipRetry):
			dropped++ // its own line said why
			continue
		}
		after := w.retryDelay(retry, err)
		if rerr := queue.Requeue(context.WithoutCancel(ctx), w.requeue, on, ps[i], after); rerr != nil {
			failed = append(failed, rerr)
			continue
		}
		requeued++
	}
	l.set(slog.Int("requeued", requeued), slog.Int("skipped", dropped))
	if len(failed) > 0 {
		l.result = resultRedisError
		return fmt.Errorf("%d of %d deliveries could not come back on their own: %w", len(failed), len(ps), errors.Join(failed...))
	}
	l.result = resultDone
	return nil
}
