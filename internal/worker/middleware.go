package worker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/tracing"
)

// Middleware is what every task attempt gets around it: the trace of the
// request that recorded the delivery continued in a span, one log line
// with what the attempt learned, and its duration. Use it as asynq's
// ServeMux.Use(worker.Middleware).
func (w *Worker) Middleware(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) (err error) {
		start := time.Now()
		taskID, _ := asynq.GetTaskID(ctx)
		retry, _ := asynq.GetRetryCount(ctx)
		l := &taskLog{}
		l.set(slog.String("task_id", taskID), slog.Int("retry", retry), slog.String("worker_id", w.cfg.WorkerID))
		ctx = tracing.Propagator.Extract(ctx, propagation.MapCarrier(task.Headers()))
		ctx, span := w.tracer.Start(ctx, "deliver notification", trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("messaging.message.id", taskID), attribute.Int("sekali.retry", retry)))
		if sc := span.SpanContext(); sc.IsValid() {
			l.set(slog.String("trace_id", sc.TraceID().String()))
		}

		err = next.ProcessTask(context.WithValue(ctx, taskLogKey{}, l), task)

		elapsed := time.Since(start)
		w.metrics.processing.Observe(elapsed.Seconds())
		span.SetAttributes(attribute.String("sekali.result", string(l.result)))
		if err != nil && IsFailure(err) {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		msg := "delivery attempt"
		if l.many {
			// Each delivery said its own line (task.go); this one is
			// the task's.
			msg = "task of many deliveries"
		}
		w.logLine(ctx, l, msg, err, elapsed)
		return err
	})
}

// logLine writes l, the line of one delivery's attempt (or of a task of
// many), with its result, error and duration, at the level its result
// calls for.
func (w *Worker) logLine(ctx context.Context, l *taskLog, msg string, err error, elapsed time.Duration) {
	level := slog.LevelInfo
	switch {
	case errors.Is(err, errProviderUnavailable) && l.result == resultProviderUnavailable:
		level = slog.LevelDebug // one WARN per outage says it (providerUnavailable)
	case l.result == resultPinnedMissing:
		level = slog.LevelWarn // no outage will end it: an operator must look
	case err != nil && IsFailure(err):
		level = slog.LevelWarn
		if errors.Is(err, asynq.SkipRetry) {
			level = slog.LevelError
		}
		l.set(slog.String("error", mail.RedactAddresses(err.Error())))
	}
	l.set(slog.String("result", string(l.result)), slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000))
	w.log.LogAttrs(ctx, level, msg, l.attrs...)
}

// taskLog collects what one run of the handler learned, for its one log
// line; each key appears once, the last value set winning.
type taskLog struct {
	attrs  []slog.Attr
	result result
	many   bool // the task's deliveries write lines of their own
}

// member is the line of the i-th delivery of a task of many: the task's
// fields so far (its id, retry, worker, trace), and which member it is.
func (l *taskLog) member(i int) *taskLog {
	m := &taskLog{attrs: slices.Clone(l.attrs)}
	m.set(slog.Int("member", i))
	return m
}

type taskLogKey struct{}

// taskLogFrom returns the attempt's log record that Middleware put in
// ctx, or a record nobody reads when the handler runs without it.
func taskLogFrom(ctx context.Context) *taskLog {
	if l, ok := ctx.Value(taskLogKey{}).(*taskLog); ok {
		return l
	}
	return &taskLog{}
}

func (l *taskLog) set(attrs ...slog.Attr) {
	for _, a := range attrs {
		if i := slices.IndexFunc(l.attrs, func(b slog.Attr) bool { return b.Key == a.Key }); i >= 0 {
			l.attrs[i] = a
			continue
		}
		l.attrs = append(l.attrs, a)
	}
}
