// Package binary is what each of sekali's binaries (cmd/api, cmd/worker,
// cmd/reconciler) does alike before its own work: main, which runs the
// binary's run until SIGINT or SIGTERM and exits 1 on its error, and the
// settings every one of them reads.
package binary

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/sekali-dev/sekali/internal/debugserver"
	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/tracing"
)

// Run is a binary's run: it reads its configuration through getenv, does
// its work until ctx ends, then shuts down; tests call it directly.
type Run func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Main runs run with the process's arguments, environment and streams,
// its context ending at SIGINT or SIGTERM, and exits 1 with "name: err"
// on standard error when it fails. A run that printed its usage because
// it was asked to (flag.ErrHelp) has not failed.
func Main(name string, run Run) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// IsHelp reports whether a binary's only argument asks for its usage:
// help, -h, -help or --help, as a newcomer types them.
func IsHelp(args []string) bool {
	return len(args) == 1 && slices.Contains([]string{"help", "-h", "-help", "--help"}, args[0])
}

// Common are the settings every binary reads the same way.
type Common struct {
	DatabaseURL string             // DATABASE_URL: the primary
	Redis       asynq.RedisConnOpt // REDIS_URL: the queue, the locks, the caches
	Queue       string             // DELIVERY_QUEUE: the asynq queue deliveries travel on
	LogLevel    slog.Level         // LOG_LEVEL
	MetricsAddr string             // METRICS_ADDR: /metrics and /healthz, a listener of its own
	PprofAddr   string             // PPROF_ADDR: the profiler, off unless set
}

// ReadCommon reads the settings every binary reads from env, whose
// problems env reports with the binary's own; metricsAddr is the
// binary's default METRICS_ADDR (each has a port of its own, so that the
// three can run on one host).
func ReadCommon(env *envconfig.Reader, metricsAddr string) Common {
	c := Common{
		DatabaseURL: env.Secret("DATABASE_URL", postgres.DefaultURL),
		Queue:       env.String("DELIVERY_QUEUE", notify.DefaultQueue),
		LogLevel:    env.LogLevel("LOG_LEVEL"),
		MetricsAddr: env.String("METRICS_ADDR", metricsAddr),
		PprofAddr:   env.String("PPROF_ADDR", ""),
	}
	var err error
	c.Redis, err = redisconn.Parse(env.Secret("REDIS_URL", redisconn.DefaultURL))
	env.Check("REDIS_URL", err)
	return c
}

// Database opens the pool of DATABASE_URL and migrates the schema (every
// binary may be the first of a release to start); the caller closes it.
func (c Common) Database(ctx context.Context, log *slog.Logger) (*pgxpool.Pool, error) {
	pool, err := postgres.Open(ctx, c.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if err := postgres.Migrate(ctx, pool, log); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// Profiler serves the runtime profiles on PPROF_ADDR when it is set;
// stop ends it (a no-op when it is not).
func (c Common) Profiler(log *slog.Logger) (stop func(), err error) {
	if c.PprofAddr == "" {
		return func() {}, nil
	}
	profiles, err := debugserver.Start(c.PprofAddr, log)
	if err != nil {
		return nil, err
	}
	return func() { _ = profiles.Close() }, nil
}

// Tracing sets up the binary's spans for service (tracing.Setup, from
// the OTEL_* variables); stop flushes what is left, for at most 5 s, even
// after ctx has ended: flushing spans is best effort.
func Tracing(ctx context.Context, service string, getenv func(string) string) (tp trace.TracerProvider, stop func(), err error) {
	tp, flush, err := tracing.Setup(ctx, service, getenv)
	if err != nil {
		return nil, nil, err
	}
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = flush(sctx)
	}, nil
}

// Logger is the binary's JSON log at the level of LOG_LEVEL, every line
// naming the service; wrap, when not nil, wraps its handler (the API's
// request fields).
func (c Common) Logger(out io.Writer, service string, wrap func(slog.Handler) slog.Handler) *slog.Logger {
	var h slog.Handler = slog.NewJSONHandler(out, &slog.HandlerOptions{Level: c.LogLevel})
	if wrap != nil {
		h = wrap(h)
	}
	return slog.New(h).With("service", service)
}
