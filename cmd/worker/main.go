// Command worker sends the e-mails the API recorded: an asynq server for
// notification:deliver tasks that drives each delivery pending → sending
// → sent through a Redis lock, fenced PostgreSQL transitions and SMTP.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sekali-dev/sekali/internal/binary"
	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/failpoint"
	"github.com/sekali-dev/sekali/internal/healthcheck"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/opsserver"
	"github.com/sekali-dev/sekali/internal/pace"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/roster"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/worker"
)

func main() { binary.Main("worker", run) }

// usage is what `worker --help` prints.
const usage = `usage: worker [healthcheck]

With no command, the worker sends the e-mails the API recorded until
SIGINT or SIGTERM, then drains what it holds. It is configured by
environment variables (README.md, Configuration): DATABASE_URL,
REDIS_URL, PROVIDER or PROVIDERS and each provider's settings (SMTP_HOST,
...), MAIL_FROM, WORKER_CONCURRENCY, TEMPLATES_DIR, ...

commands:
  healthcheck   exit 0 if the running worker answers /healthz (METRICS_ADDR, default :9101)
  help          this (also -h, --help)
`

type config struct {
	binary.Common
	Concurrency       int
	LockTTL           time.Duration
	MaxAge            time.Duration
	ProbeInterval     time.Duration
	SendTimeout       time.Duration
	ShutdownTimeout   time.Duration
	TaskCheckInterval time.Duration
	From              string              // MAIL_FROM, under BRAND_NAME when it has no name of its own (mail.NamedSender)
	Unsubscribe       worker.Unsubscribe  // UNSUBSCRIBE_URL, UNSUBSCRIBE_SECRET, UNSUBSCRIBE_MAILTO
	Providers         []mail.Descriptor   // PROVIDERS (or PROVIDER), in order of preference
	Senders           []mail.SenderConfig // each provider's settings, in the same order
	DedupWindows      []time.Duration     // each provider's window for sending an unknown attempt again (roster.DedupWindows)
	Paces             []pace.Config       // each provider's pace: <NAME>_RATE, <NAME>_BURST, <NAME>_DAILY_QUOTA (a zero Rate: by its answers alone)
	PaceWait          time.Duration       // PACE_WAIT: how long a task waits for a token in its goroutine
	SpillAfter        time.Duration       // PACE_SPILL_AFTER: past this wait a delivery goes to the next provider; 0: never
	Batches           bool                // PROVIDER_BATCHES: many messages a request where the provider takes them
	Brand             mailtemplate.Brand  // BRAND_NAME, BRAND_LOGO_URL, BRAND_ADDRESS, BRAND_SUPPORT_EMAIL: what the layouts show
	TemplatesReload   bool                // TEMPLATES_RELOAD: TEMPLATES_DIR read again when its files change (make run)
}

func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	cfg := config{
		Common:            binary.ReadCommon(env, ":9101"),
		Concurrency:       env.Int("WORKER_CONCURRENCY", 10, 1, 1000),
		LockTTL:           env.Duration("LOCK_TTL", 30*time.Second),
		MaxAge:            env.Duration("DELIVERY_MAX_AGE", 120*time.Hour),
		ProbeInterval:     env.Duration("PROVIDER_PROBE_INTERVAL", 5*time.Second),
		SendTimeout:       env.Duration("SEND_TIMEOUT", 30*time.Second),
		ShutdownTimeout:   env.Duration("SHUTDOWN_TIMEOUT", 45*time.Second),
		TaskCheckInterval: env.Duration("TASK_CHECK_INTERVAL", worker.DefaultTaskCheckInterval),
		From:              env.String("MAIL_FROM", "orders@shop.example"),
		Providers:         roster.Read(env),
		Brand:             mailtemplate.ReadBrand(getenv, env.Check),
	}
	// A bare MAIL_FROM goes out under BRAND_NAME, for every provider.
	from, err := mail.NamedSender(cfg.From, cfg.Brand.Name)
	if env.Check("BRAND_NAME", err) {
		cfg.From = from
	}
	settings := mail.SenderSettings{From: cfg.From, Timeout: env.Duration("PROVIDER_TIMEOUT", 15*time.Second), MaxIdle: cfg.Concurrency}
	for _, d := range cfg.Providers {
		cfg.Senders = append(cfg.Senders, d.Sender(env, settings))
	}
	cfg.DedupWindows = roster.DedupWindows(env, cfg.Providers)
	for _, d := range cfg.Providers {
		cfg.Paces = append(cfg.Paces, readPace(env, d))
	}
	cfg.PaceWait = env.Duration("PACE_WAIT", 5*time.Second)
	cfg.SpillAfter = env.DurationOrZero("PACE_SPILL_AFTER", 0)
	cfg.Batches = env.OneOf("PROVIDER_BATCHES", "on", "on", "off") == "on"
	cfg.TemplatesReload = env.OneOf("TEMPLATES_RELOAD", "false", "true", "false") == "true"
	// A send may take SEND_TIMEOUT, then recording its outcome and
	// releasing its lock: SIGTERM must leave time for all of it.
	if least := worker.MinShutdownTimeout(cfg.SendTimeout); cfg.ShutdownTimeout < least {
		env.Check("SHUTDOWN_TIMEOUT", fmt.Errorf("%v must be at least %v (SEND_TIMEOUT %v, then recording the outcome and releasing the lock), so that SIGTERM lets a send finish and be recorded",
			cfg.ShutdownTimeout, least, cfg.SendTimeout))
	}
	reported := map[string]bool{} // PROVIDER_TIMEOUT is the HTTP providers' shared setting: said once
	for _, s := range cfg.Senders {
		if t, name := s.SendTimeout(); t >= cfg.LockTTL && !reported[name] {
			// A worker frozen after its last lease check must not be able
			// to write message data once its lease has expired and the
			// reconciler may act: the provider's deadline has to run out
			// first.
			env.Check(name, fmt.Errorf("%v must be shorter than LOCK_TTL %v", t, cfg.LockTTL))
			reported[name] = true
		}
	}
	if v := env.String("MAX_ATTEMPTS", ""); v != "" {
		// Deliveries give up by age now: a count ran out in seconds while
		// a relay was down for minutes. Refusing the old setting makes an
		// upgrade notice the change instead of silently ignoring it.
		env.Check("MAX_ATTEMPTS", fmt.Errorf("is no longer used: a delivery keeps trying for DELIVERY_MAX_AGE (default 120h); unset MAX_ATTEMPTS"))
	}
	if cfg.LockTTL < time.Second {
		env.Check("LOCK_TTL", fmt.Errorf("%v is too short; the heartbeat renews it every third", cfg.LockTTL))
	}
	cfg.Unsubscribe = worker.Unsubscribe{BaseURL: env.String("UNSUBSCRIBE_URL", ""), Secret: env.Secret("UNSUBSCRIBE_SECRET", ""),
		Mailto: env.String("UNSUBSCRIBE_MAILTO", "")}
	env.Check("UNSUBSCRIBE_URL", checkUnsubscribeURL(cfg.Unsubscribe.BaseURL))
	if s := cfg.Unsubscribe.Secret; s != "" && len(s) < 32 {
		env.Check("UNSUBSCRIBE_SECRET", fmt.Errorf("is %d characters; use at least 32 (e.g. openssl rand -hex 32)", len(s)))
	}
	if m := cfg.Unsubscribe.Mailto; m != "" {
		_, err := mail.NormalizeAddress(m)
		env.Check("UNSUBSCRIBE_MAILTO", err)
	}
	names := roster.Names(cfg.Providers)
	for _, name := range []string{"DKIM_DOMAIN", "DKIM_SELECTOR", "DKIM_PRIVATE_KEY_FILE"} {
		if !slices.Contains(names, smtp.Name) && env.String(name, "") != "" {
			// Silently unsigned mail would be worse than a refusal.
			env.Check(name, fmt.Errorf("is for PROVIDER=smtp; %s signs with the domain verified with it", strings.Join(names, ", ")))
		}
	}
	return cfg, env.Err()
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 1 && args[0] == "healthcheck" {
		return healthcheck.Probe(envconfig.New(getenv).String("METRICS_ADDR", ":9101"))
	}
	if binary.IsHelp(args) {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if len(args) > 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unexpected arguments %q (worker --help)", args)
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	host, _ := os.Hostname()
	workerID := host + ":" + strconv.Itoa(os.Getpid())
	log := cfg.Logger(stdout, "worker", nil)
	stopProfiler, err := cfg.Profiler(log)
	if err != nil {
		return err
	}
	defer stopProfiler()

	tcfg := mailtemplate.FromEnv(getenv)
	tcfg.Brand = cfg.Brand
	// With TEMPLATES_RELOAD, a template edited while the worker runs is
	// sent from the next delivery on; its version is kept first, as the
	// worker keeps those it started with, so that the console can show
	// the e-mail as it was sent.
	var keepVersions func(*mailtemplate.Templates) error // once the database is open
	tcfg.Reload = cfg.TemplatesReload
	tcfg.OnReload = func(t *mailtemplate.Templates, err error) {
		if err != nil {
			log.Warn("templates not reloaded: the previous ones stay", "error", err.Error())
			return
		}
		log.Info("templates reloaded", "templates", strings.Join(t.Names(), ","))
		if keepVersions != nil {
			if err := keepVersions(t); err != nil {
				log.Warn("the reloaded templates' versions are not kept: the console cannot show their e-mails as sent", "error", err.Error())
			}
		}
	}
	templates, err := mailtemplate.Load(tcfg)
	if err != nil {
		return err
	}
	if names := failpoint.Value("without-templates"); names != "" {
		templates = templates.Without(strings.Split(names, "+")...) // the fault-injection suite's older build
	}
	if subs := templates.Subscriptions(); len(subs) > 0 && (cfg.Unsubscribe.BaseURL == "" || cfg.Unsubscribe.Secret == "") {
		// Inboxes require one-click unsubscribe of subscription mail.
		return fmt.Errorf("configuration:\nUNSUBSCRIBE_URL and UNSUBSCRIBE_SECRET: must be set, since %s of the subscription category: their messages carry one-click unsubscribe",
			strings.Join(subs, ", ")+map[bool]string{true: " is", false: " are"}[len(subs) == 1])
	}
	pool, err := cfg.Database(ctx, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	keepVersions = func(t *mailtemplate.Templates) error { return notify.KeepTemplateVersions(ctx, pool, t) }
	rdb := redisconn.NewClient(cfg.Redis)
	defer rdb.Close()
	var providers []worker.NamedProvider
	var budgets []*pace.Budget
	for i, s := range cfg.Senders {
		p, closeProvider, err := s.Open()
		if err != nil {
			return err
		}
		defer closeProvider()
		np := worker.NamedProvider{Name: cfg.Providers[i].Name, Provider: p, Resend: cfg.DedupWindows[i]}
		cfg.Paces[i] = accountPace(ctx, log, np.Name, p, cfg.Paces[i])
		// Every provider has a budget: one without a rate (a relay whose
		// limits no one configured) is paced by what it answers alone, its
		// refusals for pace pausing every worker.
		if np.Budget, err = pace.New(rdb, cfg.Queue, np.Name, cfg.Paces[i]); err != nil {
			return fmt.Errorf("configuration:\n%w", err)
		}
		budgets = append(budgets, np.Budget)
		providers = append(providers, np)
	}

	tp, stopTracing, err := binary.Tracing(ctx, "sekali-worker", getenv)
	if err != nil {
		return err
	}
	defer stopTracing()

	reg := opsserver.NewRegistry()
	w := worker.New(pool, rdb, providers, templates, worker.Config{
		LockTTL:         cfg.LockTTL,
		MaxAge:          cfg.MaxAge,
		ProbeInterval:   cfg.ProbeInterval,
		SendTimeout:     cfg.SendTimeout,
		MessageIDDomain: mail.MessageIDDomain(cfg.From), // validated by loadConfig
		WorkerID:        workerID,
		Queue:           cfg.Queue,
		Concurrency:     cfg.Concurrency,
		Tracer:          tp.Tracer("github.com/sekali-dev/sekali/internal/worker"),
		Unsubscribe:     cfg.Unsubscribe,
		PaceWait:        cfg.PaceWait,
		SpillAfter:      cfg.SpillAfter,
		Batches:         cfg.Batches,
	}, log, worker.NewMetrics(reg))
	reg.MustRegister(pace.NewCollector(budgets...))

	// Healthy while Redis answers: without it the worker takes no task.
	ops, err := opsserver.Listen(cfg.MetricsAddr, reg, opsserver.Check{Name: "redis", Ping: func(ctx context.Context) error {
		return rdb.Ping(ctx).Err()
	}})
	if err != nil {
		return err
	}
	log.Info("worker started", "worker_id", workerID, "queue", cfg.Queue, "concurrency", cfg.Concurrency,
		"metrics_addr", ops.Addr(), "provider", senderNames(cfg.Senders), "pace", paceNames(cfg.Providers, cfg.Paces))

	g, gctx := errgroup.WithContext(ctx)
	g.Go(ops.Serve)
	g.Go(func() error {
		// Until SIGTERM, then drain and wait for the sends under way; the
		// health endpoint answers until they are done.
		err := w.Run(gctx, worker.ServerConfig{Redis: cfg.Redis, TaskCheckInterval: cfg.TaskCheckInterval, ShutdownTimeout: cfg.ShutdownTimeout})
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return errors.Join(err, ops.Shutdown(sctx))
	})
	err = g.Wait()
	log.Info("worker stopped")
	return err
}

// senderNames names the providers (and their endpoints) for the start-up
// log line: "smtp mail:1025", or "postmark, then smtp mail:1025".
func senderNames(ss []mail.SenderConfig) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = s.String()
	}
	return strings.Join(names, ", then ")
}

// checkUnsubscribeURL refuses an UNSUBSCRIBE_URL that an inbox would not
// post to: one-click unsubscribe takes https only (RFC 8058).
func checkUnsubscribeURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: want the API's public https base URL, such as https://shop.example/sekali", raw)
	}
	return nil
}

// readPace reads a provider's pace from <NAME>_RATE (requests a second,
// its documented default; 0: by its answers alone), <NAME>_BURST (1) and
// <NAME>_DAILY_QUOTA (messages over a rolling 24 h; its documented one,
// or none).
func readPace(env *envconfig.Reader, d mail.Descriptor) pace.Config {
	name := strings.ToUpper(d.Name)
	return pace.Config{
		Rate:  env.Float(name+"_RATE", d.Rate, 0, 100_000),
		Burst: env.Int(name+"_BURST", 1, 1, 100_000),
		Quota: env.Int(name+"_DAILY_QUOTA", d.Quota, 0, 1_000_000_000),
	}
}

// accountPace is the pace c of provider name, within what the provider
// says its account may send (mail.LimitsReporter: SES's GetAccount): a
// provider unpaced by configuration is paced at its account's rate and
// daily quota, and a configured rate or quota above the account's is
// lowered to it, since the provider would refuse the rest. The answer
// is asked once, at start, for a few seconds; without one the
// configured pace stands, and the log says why.
func accountPace(ctx context.Context, log *slog.Logger, name string, p mail.Provider, c pace.Config) pace.Config {
	lr, ok := p.(mail.LimitsReporter)
	if !ok {
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, accountLimitsTimeout)
	defer cancel()
	l, err := lr.Limits(ctx)
	if err != nil {
		log.Warn("the provider's account limits are unknown; its configured pace stands", "provider", name, "pace", c.String(), "error", err)
		return c
	}
	was := c
	if l.Rate > 0 && (c.Rate == 0 || c.Rate > l.Rate) {
		c.Rate = l.Rate
	}
	if l.Daily > 0 && (c.Quota == 0 || c.Quota > l.Daily) {
		c.Quota = l.Daily
	}
	if c != was {
		log.Info("paced within the provider's account limits",
			"provider", name, "configured", paceOf(was), "account_rate", l.Rate, "account_daily", l.Daily,
			"sent_last_24h", l.SentDaily, "pace", c.String())
	}
	return c
}

// accountLimitsTimeout bounds the start-up question of accountPace.
const accountLimitsTimeout = 10 * time.Second

// paceOf is c for a log line.
func paceOf(c pace.Config) string { return c.String() }

// paceNames says each provider's pace for the start-up line: "resend 5/s,
// burst 1", or "smtp by its answers".
func paceNames(ds []mail.Descriptor, ps []pace.Config) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name + " " + paceOf(ps[i])
	}
	return strings.Join(out, ", ")
}
