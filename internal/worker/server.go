package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hibiken/asynq"
	"golang.org/x/sync/errgroup"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
)

// ServerConfig is how a Worker is served from its queue. A field left
// zero takes its default; cmd/worker sets TaskCheckInterval and
// ShutdownTimeout from its environment, and tests shorten the waits and
// nothing else.
type ServerConfig struct {
	// Redis is asynq's connection.
	Redis asynq.RedisConnOpt
	// TaskCheckInterval is how long asynq waits before looking for a task
	// again after it found none (default DefaultTaskCheckInterval).
	TaskCheckInterval time.Duration
	// DelayedTaskCheckInterval is how often tasks due for a retry are
	// moved back to the queue (default 1s).
	DelayedTaskCheckInterval time.Duration
	// ShutdownTimeout is how long Run waits for sends under way once ctx
	// is done (default MinShutdownTimeout of the worker's SendTimeout).
	ShutdownTimeout time.Duration
	// RetryBase scales the back-off of a failed task (RetryDelay: 1s,
	// doubling up to 5 minutes; default 1s). Waiting (for a lock, the
	// provider, a worker that knows the template) keeps its own delays.
	RetryBase time.Duration
	// ConcurrencyPoll is how often an operator's change of the queue's
	// concurrency is looked for (WatchConcurrency; default 2s).
	ConcurrencyPoll time.Duration
}

// DefaultTaskCheckInterval is ServerConfig.TaskCheckInterval's default,
// TASK_CHECK_INTERVAL's: most of a delivery's latency at low load.
const DefaultTaskCheckInterval = 20 * time.Millisecond

// Run serves w from its queue (Config.Queue) with its concurrency
// until ctx is done, then shuts down in the order that loses nothing:
// w stops claiming (Drain), the sends under way finish and are recorded
// (up to ShutdownTimeout), and only then does Run return. Meanwhile it
// follows the operator's concurrency and probes a provider that refuses
// us. It is the one way the worker is served, in cmd/worker and in every
// test that runs a worker behind a queue.
func (w *Worker) Run(ctx context.Context, cfg ServerConfig) error {
	if cfg.TaskCheckInterval <= 0 {
		cfg.TaskCheckInterval = DefaultTaskCheckInterval
	}
	if cfg.DelayedTaskCheckInterval <= 0 {
		cfg.DelayedTaskCheckInterval = time.Second
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = MinShutdownTimeout(w.cfg.SendTimeout)
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = time.Second
	}
	if cfg.ConcurrencyPoll <= 0 {
		cfg.ConcurrencyPoll = 2 * time.Second
	}
	// The template versions this worker renders, kept before its first
	// hand-over names one. Stopped meanwhile, it stops as asked.
	if err := notify.KeepTemplateVersions(ctx, w.db, w.templates); err != nil {
		if ctx.Err() != nil {
			return nil //nolint:nilerr // stopped as asked: not a failure to start
		}
		return err
	}
	concurrency := max(w.cfg.Concurrency, 1)
	w.retryDelay = func(n int, err error) time.Duration {
		if IsFailure(err) {
			return time.Duration(float64(RetryDelay(n, err, nil)) * cfg.RetryBase.Seconds())
		}
		return RetryDelay(n, err, nil)
	}
	srv := asynq.NewServer(cfg.Redis, asynq.Config{
		Concurrency: concurrency,
		// Urgent mail first: a task of LaterQueue (subscription mail, a
		// delivery scheduled for later) is taken only while the queue
		// has none, so that confirmations never wait behind them when
		// the provider's pace is scarce.
		Queues:                   map[string]int{w.cfg.Queue: 2, notify.LaterQueue(w.cfg.Queue): 1},
		StrictPriority:           true,
		TaskCheckInterval:        cfg.TaskCheckInterval,
		DelayedTaskCheckInterval: cfg.DelayedTaskCheckInterval,
		ShutdownTimeout:          cfg.ShutdownTimeout,
		RetryDelayFunc:           func(n int, err error, _ *asynq.Task) time.Duration { return w.retryDelay(n, err) },
		IsFailure:                IsFailure,
		Logger:                   asynqLogger{w.log.With("component", "asynq")},
		LogLevel:                 asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(w.Middleware)
	mux.Handle(queue.TaskTypeDeliver, w)
	if err := srv.Start(mux); err != nil {
		return fmt.Errorf("start asynq server: %w", err)
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		w.WatchConcurrency(gctx, w.cfg.Queue, concurrency, cfg.ConcurrencyPoll)
		return nil
	})
	g.Go(func() error {
		w.WatchProvider(gctx, w.cfg.ProbeInterval)
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		w.log.Info("worker shutting down: finishing in-flight sends", "timeout", cfg.ShutdownTimeout.String())
		w.Drain()      // no new claims: only sends under way are waited for
		srv.Shutdown() // waits for running handlers up to ShutdownTimeout
		return nil
	})
	return g.Wait()
}

// asynqLogger sends asynq's own log lines through slog.
type asynqLogger struct{ log *slog.Logger }

func (l asynqLogger) Debug(args ...any) { l.log.Debug(fmt.Sprint(args...)) }
func (l asynqLogger) Info(args ...any)  { l.log.Info(fmt.Sprint(args...)) }
func (l asynqLogger) Warn(args ...any)  { l.log.Warn(fmt.Sprint(args...)) }
func (l asynqLogger) Error(args ...any) { l.log.Error(fmt.Sprint(args...)) }
func (l asynqLogger) Fatal(args ...any) {
	l.log.Error(fmt.Sprint(args...))
	os.Exit(1)
}
