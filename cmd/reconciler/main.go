// Command reconciler repairs what crashes leave behind: pending deliveries
// whose task is gone are queued again, and sending deliveries whose worker
// stopped are settled by asking the provider, or by the template's policy.
//
//	reconciler          run a pass every RECONCILE_INTERVAL until SIGINT/SIGTERM
//	reconciler --once   run one pass, print what it did, exit
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"golang.org/x/sync/errgroup"

	"github.com/sekali-dev/sekali/internal/binary"
	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/healthcheck"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/opsserver"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/reconcile"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/roster"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/webhookout"
)

func main() { binary.Main("reconciler", run) }

// usage is what `reconciler --help` prints, before its flags.
const usage = `usage: reconciler [--once] [healthcheck]

With no command, the reconciler runs a pass every RECONCILE_INTERVAL
until SIGINT or SIGTERM: it settles stale sends, queues orphaned
deliveries, deletes what retention says, and posts the shop's webhooks.
It is configured by environment variables (README.md, Configuration):
DATABASE_URL, REDIS_URL, PROVIDER or PROVIDERS, MAIL_LOOKUP_URL, ...

commands:
  healthcheck   exit 0 if the running reconciler answers /healthz (METRICS_ADDR, default :9102)
  help          this (also -h, --help)

flags:
`

type config struct {
	binary.Common
	Interval  time.Duration
	TaskBatch int                 // TASK_BATCH: the most deliveries one re-enqueued task carries
	Providers []mail.Descriptor   // PROVIDERS (or PROVIDER), as the workers': whose look-up or guarantee settles an ambiguous send
	Lookups   []mail.LookupOpener // each provider's search, nil if it has none (configured)
	Reconcile reconcile.Config    // Providers named, with their dedup windows; the look-ups are opened at start
	Webhooks  webhookout.Config   // the shop's webhook endpoints: the dispatcher's settings
}

func loadConfig(getenv func(string) string, templates *mailtemplate.Templates) (config, error) {
	env := envconfig.New(getenv)
	cfg := config{
		Common:    binary.ReadCommon(env, ":9102"),
		Interval:  env.Duration("RECONCILE_INTERVAL", 5*time.Second),
		TaskBatch: env.Int("TASK_BATCH", queue.MaxTaskDeliveries, 1, queue.MaxTaskDeliveries),
		Reconcile: reconcile.Config{
			MaxAge:        env.Duration("DELIVERY_MAX_AGE", 120*time.Hour),
			PendingAfter:  env.Duration("PENDING_REENQUEUE_AFTER", 30*time.Second),
			Batch:         env.Int("RECONCILE_BATCH", 100, 1, 10000),
			DefaultPolicy: reconcile.Policy(env.OneOf("RECONCILE_DEFAULT_POLICY", string(reconcile.PolicyHold), string(reconcile.PolicyHold), string(reconcile.PolicyResend))),
		},
	}
	cfg.Reconcile.DeliveryRetention = env.DurationOrZero("DELIVERY_RETENTION", 0)
	// Test mode's orders (docs/testmode.md) go sooner than any live row.
	cfg.Reconcile.TestRetention = env.DurationOrZero("TEST_RETENTION", 7*24*time.Hour)
	cfg.Providers = roster.Read(env)
	windows := roster.DedupWindows(env, cfg.Providers)
	for i, d := range cfg.Providers {
		p := reconcile.Provider{Name: d.Name, DedupWindow: windows[i]}
		cfg.Reconcile.Providers = append(cfg.Reconcile.Providers, p)
		var open mail.LookupOpener
		if d.Lookup != nil {
			open = d.Lookup(env)
		}
		cfg.Lookups = append(cfg.Lookups, open)
	}
	names := roster.Names(cfg.Providers)
	for _, name := range []string{"MAIL_LOOKUP_URL", "MAIL_LOOKUP_API"} {
		if !slices.Contains(names, smtp.Name) && env.String(name, "") != "" {
			env.Check(name, fmt.Errorf("is for PROVIDER=smtp with a Mailpit or MailHog; with PROVIDER=%s the provider's own API settles ambiguous sends", strings.Join(names, ",")))
		}
	}
	var err error
	from := env.String("MAIL_FROM", "orders@shop.example")
	_, err = mail.ParseSender(from)
	env.Check("MAIL_FROM", err)
	if err == nil {
		cfg.Reconcile.MessageIDDomain = mail.MessageIDDomain(from)
	}
	cfg.Webhooks = webhookout.Config{
		Guard:    webhookout.ReadGuard(env),
		Interval: env.Duration("WEBHOOK_INTERVAL", time.Second),
		Timeout:  env.Duration("WEBHOOK_TIMEOUT", 10*time.Second),
		MaxAge:   env.Duration("WEBHOOK_MAX_AGE", 72*time.Hour),
	}
	cfg.Reconcile.Subscriptions = templates.Subscriptions()
	cfg.Reconcile.Policies, err = parsePolicies(env.String("RECONCILE_POLICIES", ""), templates)
	env.Check("RECONCILE_POLICIES", err)
	return cfg, env.Err()
}

// parsePolicies reads "order-confirmation=hold,order-shipped=resend".
func parsePolicies(s string, templates *mailtemplate.Templates) (map[string]reconcile.Policy, error) {
	out := map[string]reconcile.Policy{}
	var errs []error
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, policy, _ := strings.Cut(item, "=")
		switch {
		case !templates.Has(name):
			errs = append(errs, fmt.Errorf("%q: no template %q (have %v)", item, name, templates.Names()))
		case policy != string(reconcile.PolicyHold) && policy != string(reconcile.PolicyResend):
			errs = append(errs, fmt.Errorf("%q: policy must be hold or resend", item))
		default:
			out[name] = reconcile.Policy(policy)
		}
	}
	return out, errors.Join(errs...)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reconciler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	once := fs.Bool("once", false, "run one pass, print what it did and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if binary.IsHelp(args) { // help, -h, --help: the usage on stdout, not a failure
		fs.SetOutput(stdout)
		fs.Usage()
		return nil
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 1 && fs.Arg(0) == "healthcheck" {
		return healthcheck.Probe(envconfig.New(getenv).String("METRICS_ADDR", ":9102"))
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments %q (reconciler --help)", fs.Args())
	}
	templates, err := mailtemplate.Load(mailtemplate.FromEnv(getenv))
	if err != nil {
		return err
	}
	cfg, err := loadConfig(getenv, templates)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	logOut := stdout
	if *once {
		logOut = stderr // stdout carries the report
	}
	host, _ := os.Hostname()
	actor := "reconciler:" + host + ":" + strconv.Itoa(os.Getpid())
	cfg.Reconcile.Actor = actor
	log := cfg.Logger(logOut, "reconciler", nil)
	if !*once { // not for a one-off pass beside the running daemon
		stopProfiler, err := cfg.Profiler(log)
		if err != nil {
			return err
		}
		defer stopProfiler()
	}

	pool, err := cfg.Database(ctx, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	for i, open := range cfg.Lookups {
		if open == nil {
			continue
		}
		if cfg.Reconcile.Providers[i].Lookup, err = open(ctx); err != nil {
			return fmt.Errorf("configuration:\n%w", err)
		}
	}
	inspector := asynq.NewInspector(cfg.Redis)
	defer inspector.Close()

	reg := opsserver.NewRegistry()
	rdb := redisconn.NewClient(cfg.Redis)
	defer rdb.Close()
	for _, q := range notify.Queues(cfg.Queue) {
		reg.MustRegister(reconcile.NewQueueCollector(inspector, rdb, q))
	}
	enqueuer := queue.NewEnqueuer(rdb, cfg.Queue, log, reg)
	enqueuer.Prioritize(templates) // as the API's: a delivery re-enqueued goes on its own lane
	enqueuer.BatchUpTo(cfg.TaskBatch)
	rec := reconcile.New(pool, enqueuer, inspector, cfg.Reconcile, log, reg)
	hooks := webhookout.NewDispatcher(pool, cfg.Webhooks, log, reg)

	if *once {
		rep, err := rec.RunOnce(ctx)
		fmt.Fprintln(stdout, "reconcile pass:", rep)
		return err
	}

	ops, err := opsserver.Listen(cfg.MetricsAddr, reg, opsserver.Check{Name: "postgres", Ping: pool.Ping})
	if err != nil {
		return err
	}
	log.Info("reconciler started", "actor", actor, "interval", cfg.Interval.String(),
		"pending_reenqueue_after", cfg.Reconcile.PendingAfter.String(), "providers", providerLine(cfg.Reconcile.Providers),
		"metrics_addr", ops.Addr())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(ops.Serve)
	g.Go(func() error {
		hooks.Run(gctx)
		return nil
	})
	g.Go(func() error {
		err := rec.Run(gctx, cfg.Interval)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return errors.Join(err, ops.Shutdown(sctx))
	})
	return g.Wait()
}

// providerLine says, for the start-up log line, how each provider's
// ambiguous sends are settled: "resend (dedup 23h0m0s), smtp (look-up)".
func providerLine(ps []reconcile.Provider) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		how := "policy"
		switch {
		case p.Lookup != nil:
			how = "look-up"
		case p.DedupWindow > 0:
			how = "dedup " + p.DedupWindow.String()
		}
		parts[i] = p.Name + " (" + how + ")"
	}
	return strings.Join(parts, ", ")
}
