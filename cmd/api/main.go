// Command api is sekali's checkout API: it records orders together with
// the intent to e-mail their confirmation, and queues the delivery.
// `api --help` lists its commands (usage, below).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"golang.org/x/sync/errgroup"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/binary"
	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/healthcheck"
	"github.com/sekali-dev/sekali/internal/httpapi"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/opsserver"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/quota"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/roster"
	"github.com/sekali-dev/sekali/internal/webhookout"
)

func main() { binary.Main("api", run) }

// usage is what `api --help` prints, and a command it does not know.
const usage = `usage: api [command]

With no command, the API migrates the schema, then serves HTTP until
SIGINT or SIGTERM. It is configured by environment variables (README.md,
Configuration): DATABASE_URL, REDIS_URL, HTTP_ADDR (default :8080),
ADMIN_TOKEN, TEMPLATES_DIR, ...

commands:
  migrate                     migrate the schema and exit
  healthcheck                 exit 0 if the running API answers /healthz (HTTP_ADDR)
  keys create --name NAME --scopes SCOPE,... [--replaces KEY_ID] [--test]
                              make an API key and print it, the only time it is shown;
                              scopes: checkout, orders:read, orders:write,
                              notifications:write, admin (an operator's)
  keys list                   list the API keys: id, prefix, name, mode, scopes,
                              when made and revoked; never a secret
  keys revoke KEY             revoke a key, named by its id or its prefix
  templates check DIR         check a template directory as every binary does at start
  help                        this (also -h, --help)

The keys commands use DATABASE_URL, and are recorded as operators'
actions under cli:<user>@<host>.
`

type config struct {
	binary.Common
	HTTPAddr        string
	IdempotencyTTL  time.Duration
	SendAtHorizon   time.Duration     // SEND_AT_HORIZON: how far ahead a notification may be scheduled
	WebhookGuard    *webhookout.Guard // WEBHOOK_ALLOW_HTTP, WEBHOOK_ALLOW_NETWORKS: which endpoint URLs are taken
	UnsubscribeKey  string            // UNSUBSCRIBE_SECRET: verifies one-click unsubscribe links
	UnsubscribeTTL  time.Duration     // UNSUBSCRIBE_TOKEN_TTL: how long after its issue day a link works
	ShutdownTimeout time.Duration
	AdminToken      string
	RateLimits      httpapi.RateLimits
	Webhooks        roster.Webhooks
	MaxInFlight     int
	TaskBatch       int // TASK_BATCH: the most deliveries one task carries
	BodyTimeout     time.Duration
	// PublicCheckout is CHECKOUT_MODE=public: POST /v1/orders without an
	// API key too, held to PublicRules and counted against PublicQuota.
	PublicCheckout bool
	PublicRules    order.PublicRules
	PublicQuota    quota.Limits
	// Brand is what the layouts of the previews and the gallery show
	// (BRAND_NAME, BRAND_LOGO_URL, BRAND_ADDRESS, BRAND_SUPPORT_EMAIL):
	// the worker's, so that a preview is the e-mail.
	Brand mailtemplate.Brand
	// TemplatesReload is TEMPLATES_RELOAD: TEMPLATES_DIR read again when
	// its files change, for development (make run).
	TemplatesReload bool
}

func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	cfg := config{
		Common:          binary.ReadCommon(env, ":9100"),
		HTTPAddr:        env.String("HTTP_ADDR", ":8080"),
		IdempotencyTTL:  env.Duration("IDEMPOTENCY_KEY_TTL", 24*time.Hour),
		SendAtHorizon:   env.Duration("SEND_AT_HORIZON", order.DefaultSendAtHorizon),
		WebhookGuard:    webhookout.ReadGuard(env),
		UnsubscribeKey:  env.Secret("UNSUBSCRIBE_SECRET", ""),
		UnsubscribeTTL:  env.Duration("UNSUBSCRIBE_TOKEN_TTL", mail.DefaultUnsubscribeTTL),
		ShutdownTimeout: env.Duration("SHUTDOWN_TIMEOUT", 15*time.Second),
		AdminToken:      env.Secret("ADMIN_TOKEN", ""),
		MaxInFlight:     env.Int("HTTP_MAX_IN_FLIGHT", 128, 0, 100_000),
		TaskBatch:       env.Int("TASK_BATCH", queue.MaxTaskDeliveries, 1, queue.MaxTaskDeliveries),
		BodyTimeout:     env.Duration("HTTP_BODY_TIMEOUT", 5*time.Second),
		RateLimits: httpapi.RateLimits{
			Public:  httpapi.RateLimit{PerSecond: float64(env.Int("RATE_LIMIT_PUBLIC", 50, 0, 1_000_000)), Burst: env.Int("RATE_LIMIT_PUBLIC_BURST", 100, 1, 1_000_000)},
			Backend: httpapi.RateLimit{PerSecond: float64(env.Int("RATE_LIMIT_BACKEND", 500, 0, 1_000_000)), Burst: env.Int("RATE_LIMIT_BACKEND_BURST", 1000, 1, 1_000_000)},
		},
	}
	cfg.PublicCheckout = env.OneOf("CHECKOUT_MODE", "keyed", "keyed", "public") == "public"
	cfg.PublicRules.FreeOrders = env.OneOf("PUBLIC_CHECKOUT_FREE_ORDERS", "false", "true", "false") == "true"
	cfg.PublicQuota = quota.Limits{
		PerClient:    env.Int("PUBLIC_CHECKOUT_PER_CLIENT", 5, 0, 1_000_000),
		PerRecipient: env.Int("PUBLIC_CHECKOUT_PER_RECIPIENT", 5, 0, 1_000_000),
		PerDomain:    env.Int("PUBLIC_CHECKOUT_PER_DOMAIN", 300, 0, 100_000_000),
		All:          env.Int("PUBLIC_CHECKOUT_PER_HOUR", 3000, 0, 100_000_000),
		NetworkShare: env.Int("PUBLIC_CHECKOUT_NETWORK_SHARE", 10, 0, 100),
		Reserve:      env.Int("PUBLIC_CHECKOUT_RESERVE", 20, 0, 100),
	}
	cfg.RateLimits.TrustedProxies = env.Prefixes("TRUSTED_PROXIES", "10.0.0.0/8,192.168.1.5/32")
	if _, port, _ := net.SplitHostPort(cfg.MetricsAddr); cfg.MetricsAddr == cfg.HTTPAddr && port != "0" {
		env.Check("METRICS_ADDR", fmt.Errorf("%s is HTTP_ADDR: /metrics must be on a listener of its own, kept private", cfg.MetricsAddr))
	}
	if cfg.UnsubscribeTTL < 24*time.Hour {
		env.Check("UNSUBSCRIBE_TOKEN_TTL", fmt.Errorf("is %s; use at least 24h (tokens carry their issue day), and better months: readers unsubscribe from old mail", cfg.UnsubscribeTTL))
	}
	if t := cfg.AdminToken; t != "" && len(t) < 16 {
		env.Check("ADMIN_TOKEN", fmt.Errorf("is %d characters; use at least 16 (e.g. openssl rand -hex 32)", len(t)))
	}
	cfg.Webhooks = roster.ReadWebhooks(env)
	cfg.Brand = mailtemplate.ReadBrand(getenv, env.Check)
	cfg.TemplatesReload = env.OneOf("TEMPLATES_RELOAD", "false", "true", "false") == "true"
	return cfg, env.Err()
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	migrateOnly := false
	switch {
	case len(args) == 0:
	case binary.IsHelp(args):
		fmt.Fprint(stdout, usage)
		return nil
	case len(args) == 1 && args[0] == "migrate":
		migrateOnly = true
	case len(args) == 1 && args[0] == "healthcheck":
		return healthcheck.Probe(envconfig.New(getenv).String("HTTP_ADDR", ":8080"))
	case len(args) >= 2 && args[0] == "keys" && args[1] == "create":
		return createKey(ctx, args[2:], getenv, stdout, stderr)
	case len(args) >= 2 && args[0] == "keys" && args[1] == "list":
		return listKeys(ctx, args[2:], getenv, stdout, stderr)
	case len(args) >= 2 && args[0] == "keys" && args[1] == "revoke":
		return revokeKey(ctx, args[2:], getenv, stdout, stderr)
	case len(args) == 3 && args[0] == "templates" && args[1] == "check":
		return checkTemplates(args[2], getenv, stdout)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unexpected arguments %q (api --help lists the commands)", args)
	}

	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	log := cfg.Logger(stdout, "api", httpapi.LogHandler)
	// Templates first: a broken TEMPLATES_DIR is named even while the
	// database is down. `api migrate` needs none.
	var templates *mailtemplate.Templates
	if !migrateOnly {
		tcfg := mailtemplate.FromEnv(getenv)
		tcfg.Brand = cfg.Brand
		tcfg.Reload, tcfg.OnReload = cfg.TemplatesReload, logReload(log)
		if templates, err = mailtemplate.Load(tcfg); err != nil {
			return err
		}
	}
	pool, err := cfg.Database(ctx, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	if migrateOnly {
		return nil
	}
	stopProfiler, err := cfg.Profiler(log)
	if err != nil {
		return err
	}
	defer stopProfiler()

	inspector := asynq.NewInspector(cfg.Redis)
	defer inspector.Close()
	rdb := redisconn.NewClient(cfg.Redis)
	defer rdb.Close()

	tp, stopTracing, err := binary.Tracing(ctx, "sekali-api", getenv)
	if err != nil {
		return err
	}
	defer stopTracing()

	reg := opsserver.NewRegistry()
	ops, err := opsserver.Listen(cfg.MetricsAddr, reg)
	if err != nil {
		return err
	}
	defer ops.Close()
	enqueuer := queue.NewEnqueuer(rdb, cfg.Queue, log, reg)
	enqueuer.Prioritize(templates) // what may wait goes on the queue's later lane
	enqueuer.BatchUpTo(cfg.TaskBatch)
	orders := order.NewService(pool, enqueuer, templates, cfg.IdempotencyTTL, reg)
	orders.SendAtHorizon = cfg.SendAtHorizon
	if cfg.PublicCheckout {
		rules := cfg.PublicRules
		rules.Quota = quota.NewHourly(rdb, cfg.PublicQuota, cfg.Queue, reg)
		orders.Public = &rules
		log.Warn("CHECKOUT_MODE=public: POST /v1/orders takes checkouts without an API key (docs/security.md)",
			"quota", cfg.PublicQuota.String(), "free_orders", rules.FreeOrders)
		if len(cfg.RateLimits.TrustedProxies) == 0 && (cfg.PublicQuota.PerClient > 0 || cfg.PublicQuota.NetworkShare > 0) {
			log.Warn("TRUSTED_PROXIES is not set: the public checkout's cap per client and its share per network count each connection's peer; " +
				"behind a load balancer every shopper would be one client, and the storefront would be refused after PUBLIC_CHECKOUT_PER_CLIENT customers an hour")
		}
	}
	keys := apikey.NewService(pool)
	checks := []httpapi.Check{
		{Name: "postgres", Ping: pool.Ping},
		{Name: "redis", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
	}

	operator := notify.NewOperator(pool, enqueuer, inspector, rdb)

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	srv := &http.Server{
		Handler: httpapi.NewServer(httpapi.Deps{
			Log: log, Orders: orders, Templates: templates, Checks: checks, Registry: reg,
			Keys: keys, RateLimits: cfg.RateLimits, Webhooks: cfg.Webhooks.Open(mail.WebhookDeps{Tokens: operator, Log: log}), MaxInFlight: cfg.MaxInFlight,
			BodyTimeout:       cfg.BodyTimeout,
			UnsubscribeSecret: cfg.UnsubscribeKey,
			UnsubscribeTTL:    cfg.UnsubscribeTTL,
			Tracer:            tp.Tracer("github.com/sekali-dev/sekali/internal/httpapi"),
			Admin:             httpapi.Admin{Token: cfg.AdminToken, Ops: operator, Keys: keys, Webhooks: webhookout.NewService(pool, cfg.WebhookGuard)},
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if cfg.AdminToken == "" {
		log.Warn("ADMIN_TOKEN is not set: the admin API under /admin/v1 takes operator keys (API keys of the admin scope) only")
	}
	log.Info("api listening", "addr", ln.Addr().String(), "metrics_addr", ops.Addr())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(ops.Serve)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		log.Info("api shutting down: finishing in-flight requests", "timeout", cfg.ShutdownTimeout.String())
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("shut down http: %w", err)
		}
		return ops.Shutdown(sctx)
	})
	return g.Wait()
}

// logReload says, with TEMPLATES_RELOAD, that TEMPLATES_DIR was read
// again, or why the templates it had stay.
func logReload(log *slog.Logger) func(*mailtemplate.Templates, error) {
	return func(t *mailtemplate.Templates, err error) {
		if err != nil {
			log.Warn("templates not reloaded: the previous ones stay", "error", err.Error())
			return
		}
		log.Info("templates reloaded", "templates", strings.Join(t.Names(), ","))
	}
}

// createKey is `api keys create`: it makes an API key for the shop's
// backend and prints it, the only time it is shown. Operators can do the
// same, and list and revoke keys, through POST /admin/v1/api-keys.
func createKey(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("api keys create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rawName := fs.String("name", "", "whose key this is, e.g. shop-backend-2026-12")
	scopes := fs.String("scopes", "", "comma-separated: "+fmt.Sprint(apikey.Scopes))
	rawReplaces := fs.String("replaces", "", "the id of the key this one rotates: it takes over that key's notifications")
	test := fs.Bool("test", false, "a test key (sekali_test_…): its orders run the whole pipeline but never reach a provider (docs/testmode.md)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var replaces uuid.UUID
	if *rawReplaces != "" {
		id, err := uuid.Parse(*rawReplaces)
		if err != nil {
			return fmt.Errorf("--replaces %q is not an API key's id (a UUID): %w", *rawReplaces, err)
		}
		replaces = id
	}
	parsed, err := apikey.ParseScopes(strings.Split(*scopes, ","))
	name, problem := apikey.CheckName(*rawName)
	if err != nil || name == "" {
		return errors.Join(err, errors.New("give --name and --scopes"))
	}
	if problem != "" {
		return fmt.Errorf("--name %s", problem)
	}
	keys, done, err := openKeys(ctx, getenv, stderr)
	if err != nil {
		return err
	}
	defer done()
	mode := apikey.ModeLive
	if *test {
		mode = apikey.ModeTest
	}
	k, secret, err := keys.CreateReplacing(ctx, cliActor(), name, parsed, replaces, mode)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n", secret)
	fmt.Fprintf(stderr, "created %s API key %s (%s) with scopes %v; it is shown only now\n", k.Mode, k.Prefix, k.Name, k.Scopes)
	return nil
}

// openKeys is the keys of DATABASE_URL's database, migrated first (the
// keys commands may run before the API ever has); done closes it.
func openKeys(ctx context.Context, getenv func(string) string, stderr io.Writer) (keys *apikey.Service, done func(), err error) {
	env := envconfig.New(getenv)
	pool, err := postgres.Open(ctx, env.Secret("DATABASE_URL", postgres.DefaultURL))
	if err != nil {
		return nil, nil, err
	}
	if err := postgres.Migrate(ctx, pool, slog.New(slog.NewJSONHandler(stderr, nil))); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return apikey.NewService(pool), pool.Close, nil
}

// listKeys is `api keys list`: every key, revoked ones too, oldest
// first, one a line under a header; never a secret.
func listKeys(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("api keys list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("api keys list takes no arguments, not %q", fs.Args())
	}
	keys, done, err := openKeys(ctx, getenv, stderr)
	if err != nil {
		return err
	}
	defer done()
	ks, err := keys.List(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPREFIX\tNAME\tMODE\tSCOPES\tCREATED\tREVOKED")
	for _, k := range ks {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = k.RevokedAt.UTC().Format(time.RFC3339)
		}
		scopes := make([]string, len(k.Scopes))
		for i, sc := range k.Scopes {
			scopes[i] = string(sc)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.Name, k.Mode,
			strings.Join(scopes, ","), k.CreatedAt.UTC().Format(time.RFC3339), revoked)
	}
	return tw.Flush()
}

// revokeKey is `api keys revoke KEY`: the key, named by its id or by its
// prefix (as keys list shows both), ends at once; revoking a revoked key
// changes nothing.
func revokeKey(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("api keys revoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: api keys revoke KEY (its id or its prefix, as api keys list shows them)")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("name one key to revoke, by its id or its prefix")
	}
	keys, done, err := openKeys(ctx, getenv, stderr)
	if err != nil {
		return err
	}
	defer done()
	named := strings.TrimSpace(fs.Arg(0))
	id, err := uuid.Parse(named)
	if err != nil {
		ks, err := keys.List(ctx)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(ks, func(k apikey.Key) bool { return k.Prefix == named })
		if i < 0 {
			return fmt.Errorf("no API key has the id or prefix %q (api keys list shows them)", named)
		}
		id = ks[i].ID
	}
	k, err := keys.Revoke(ctx, cliActor(), id)
	if errors.Is(err, apikey.ErrNotFound) {
		return fmt.Errorf("no API key has the id %s (api keys list shows them)", id)
	}
	if err != nil {
		return err
	}
	at := "now"
	if k.RevokedAt != nil {
		at = k.RevokedAt.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(stdout, "revoked %s API key %s (%s) at %s\n", k.Mode, k.Prefix, k.Name, at)
	return nil
}

// cliActor is who the operators' actions say ran a command on this host:
// cli:<user>@<host>.
func cliActor() string {
	who := "uid " + strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	host, _ := os.Hostname()
	return "cli:" + who + "@" + cmp.Or(host, "unknown-host")
}

// checkTemplates is `api templates check DIR`: it checks a template
// directory exactly as every binary does at start (its templates, layouts
// and partials, and the built-in templates on the directory's layouts),
// and prints each problem on a line of its own, for an adopter's CI.
func checkTemplates(dir string, getenv func(string) string, stdout io.Writer) error {
	cfg := mailtemplate.FromEnv(getenv)
	cfg.Dir = dir
	// With the brand of the deploy, which the layouts render.
	env := envconfig.New(getenv)
	cfg.Brand = mailtemplate.ReadBrand(getenv, env.Check)
	if err := env.Err(); err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	names, err := mailtemplate.Load(cfg)
	if terr := (*mailtemplate.LoadError)(nil); errors.As(err, &terr) {
		for _, p := range terr.Problems {
			fmt.Fprintln(stdout, p.String())
		}
		return fmt.Errorf("%d problems in the templates of %s", len(terr.Problems), dir)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: every template loads, validates its sample and renders in each of its languages: %v\n", dir, names.Names())
	return nil
}
