package main

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/smtpsink"
)

// pipeline is one implementation of checkout → e-mail under test: how
// to start it on a fresh database, and how to read from that database
// what became of the orders offered to it. Everything else — the load,
// the rate search, the sink, the CPU and memory counted — is the same
// for every pipeline.
type pipeline struct {
	name     string // in the report: "sekali", "River"
	database string // created afresh for each run
	targets  bool   // the report shows docs/performance.md's targets beside it
	// start launches the pipeline's processes against d's database and
	// sink and sets d.apiURL.
	start func(ctx context.Context, b *bench, d *deployment, dbURL string) error
	// openSQL counts the e-mails not yet done, for the drain to wait on.
	openSQL string
	// sentSQL gives the p50 and p99, in seconds, of checkout → sent for
	// the orders checked out in [$1, $2).
	sentSQL string
	// table holds one row per e-mail, the one its steps update: whose
	// row versions (and how many were HOT) the report counts.
	table string
}

// sekali is the service itself: its API, worker and reconciler binaries,
// Redis, and the delivery rows they write.
var sekali = pipeline{
	name:     "sekali",
	database: "sekali_bench",
	targets:  true,
	start: func(ctx context.Context, b *bench, d *deployment, dbURL string) error {
		return b.startSekali(ctx, d, dbURL)
	},
	openSQL: "SELECT count(*) FROM notification_deliveries WHERE status IN ('pending', 'sending')",
	sentSQL: sentPercentiles("sent_at - created_at", "notification_deliveries", "status = 'sent'"),
	table:   "notification_deliveries",
}

// riverReference is the same path built on River (riverref.go). A job
// is done when River's completer has recorded it; finalized_at is when
// its Work returned, right after the SMTP server accepted the message.
var riverReference = pipeline{
	name:     "River",
	database: "sekali_bench_river",
	start: func(ctx context.Context, b *bench, d *deployment, dbURL string) error {
		return b.startRiver(ctx, d, dbURL)
	},
	openSQL: "SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')",
	sentSQL: sentPercentiles("finalized_at - created_at", "river_job", "state = 'completed'"),
	table:   "river_job",
}

// sentPercentiles is the query of a pipeline's sentSQL: the p50 and p99
// of delay, in seconds, over the rows of table that are done and were
// created in [$1, $2).
func sentPercentiles(delay, table, done string) string {
	return fmt.Sprintf(`
		SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM %[1]s)), 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM %[1]s)), 0)
		FROM %[2]s WHERE created_at >= $1 AND created_at < $2 AND %[3]s`, delay, table, done)
}

// deployment is a pipeline running: its database, its own SMTP sink
// (so that e-mails and duplicates are counted per pipeline, and one's
// stored messages do not weigh on the other's run), its processes.
type deployment struct {
	pipeline pipeline
	pool     *pgxpool.Pool
	sink     *smtpsink.Server
	procs    []*proc
	apiURL   string
	apiKey   string // the shop's server's key, sent with every checkout; "" for none
	redisPid int    // 0: the pipeline has no Redis
	redis    *redis.Client
	// redisBase is Redis's used_memory before the first order.
	redisBase int64
	offers    int        // rates offered so far
	mail      *mailSetup // where the workers send; nil: the sink, over SMTP
	cleanup   []func()
}

// mailSetup is a deployment's mail provider other than the SMTP sink:
// the workers' and the reconciler's settings for it.
type mailSetup struct {
	worker, reconciler map[string]string
}

// stop ends the processes, then the rest, last started first.
func (d *deployment) stop() {
	for i := len(d.cleanup) - 1; i >= 0; i-- {
		d.cleanup[i]()
	}
	d.cleanup = nil
}

// deploy creates the pipeline's database and sink and starts it, its
// workers sending to the sink or, with mail, where mail says.
func (b *bench) deploy(ctx context.Context, p pipeline, mail *mailSetup) (_ *deployment, err error) {
	d := &deployment{pipeline: p, mail: mail}
	defer func() {
		if err != nil {
			d.stop()
		}
	}()
	dbURL, err := b.freshDatabase(ctx, p.database)
	if err != nil {
		return nil, err
	}
	if d.pool, err = pgxpool.New(ctx, dbURL); err != nil {
		return nil, err
	}
	d.cleanup = append(d.cleanup, d.pool.Close)
	if d.sink, err = smtpsink.Start(smtpsink.Config{}); err != nil {
		return nil, err
	}
	d.cleanup = append(d.cleanup, func() { d.sink.Close() })
	if err := p.start(ctx, b, d, dbURL); err != nil {
		return nil, err
	}
	// Wait for the API to be ready (the others migrate concurrently).
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := b.client.Get(d.apiURL + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return d, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: the API never became ready", p.name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startSekali starts Redis and the api, worker(s) and reconciler.
func (b *bench) startSekali(ctx context.Context, d *deployment, dbURL string) error {
	for _, name := range []string{"api", "worker", "reconciler"} {
		if _, err := os.Stat(filepath.Join(b.o.binDir, name)); err != nil {
			return fmt.Errorf("%s: build the binaries first (make bench does): %w", name, err)
		}
	}
	redisURL, err := b.startRedis(d)
	if err != nil {
		return err
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	d.redis = redis.NewClient(opt)
	d.cleanup = append(d.cleanup, func() { d.redis.Close() })
	if d.redisBase, err = usedMemory(ctx, d.redis); err != nil {
		return err
	}
	common := map[string]string{"REDIS_URL": redisURL, "LOG_LEVEL": "warn", "MAIL_FROM": "orders@shop.example", "DELIVERY_QUEUE": "bench"}
	bin := func(name string) []string { return []string{filepath.Join(b.o.binDir, name)} }
	// The API logs its listening address at info; everything else at warn.
	// All the load comes from one address and one API key: a rate limit
	// per address or per key would measure the limit, not the service.
	api, err := b.startProc(ctx, d, "api", "api", bin("api"), with(common, map[string]string{
		"DATABASE_URL": withParam(dbURL, "pool_max_conns", "8"), "HTTP_ADDR": "127.0.0.1:0", "LOG_LEVEL": "info", "RATE_LIMIT_PUBLIC": "0", "RATE_LIMIT_BACKEND": "0"}))
	if err != nil {
		return err
	}
	addr, err := api.waitLog("api listening", "addr", 60*time.Second)
	if err != nil {
		return err
	}
	d.apiURL = "http://" + addr
	// Checkouts come from the shop's server, with its key (the API has
	// migrated the schema by now).
	if _, d.apiKey, err = apikey.NewService(d.pool).Create(ctx, "cli:bench", "bench", []apikey.Scope{apikey.ScopeCheckout}); err != nil {
		return err
	}
	mail := map[string]string{"SMTP_HOST": d.sink.Host(), "SMTP_PORT": strconv.Itoa(d.sink.Port()), "SMTP_TLS": "none"}
	var recMail map[string]string
	if d.mail != nil {
		// At info, to be waited for: the run's time counts from the
		// first checkout, not from the workers' start.
		mail, recMail = with(d.mail.worker, map[string]string{"LOG_LEVEL": "info"}), d.mail.reconciler
	}
	for i := 0; i < b.o.workers; i++ {
		w, err := b.startProc(ctx, d, "worker", "worker", bin("worker"), with(with(common, map[string]string{
			"DATABASE_URL": withParam(dbURL, "pool_max_conns", strconv.Itoa(b.o.concurrency)), "METRICS_ADDR": "127.0.0.1:0",
			"WORKER_CONCURRENCY": strconv.Itoa(b.o.concurrency),
		}), mail))
		if err != nil {
			return err
		}
		if d.mail != nil {
			if _, err := w.waitLog("worker started", "worker_id", 60*time.Second); err != nil {
				return err
			}
		}
	}
	_, err = b.startProc(ctx, d, "reconciler", "reconciler", bin("reconciler"), with(with(common, map[string]string{
		"DATABASE_URL": withParam(dbURL, "pool_max_conns", "2"), "METRICS_ADDR": "127.0.0.1:0"}), recMail))
	return err
}

// startRiver starts the reference's API and as many worker processes as
// sekali gets, with the same pool sizes: this binary, re-executed with
// `riverref api` and `riverref worker`.
func (b *bench) startRiver(ctx context.Context, d *deployment, dbURL string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary to start the reference: %w", err)
	}
	common := map[string]string{"LOG_LEVEL": "warn", "MAIL_FROM": "orders@shop.example",
		"RIVER_FETCH_COOLDOWN": b.o.riverFetchCooldown.String(), "RIVER_FETCH_POLL_INTERVAL": b.o.riverFetchPoll.String()}
	api, err := b.startProc(ctx, d, "river-api", "api", []string{self, "riverref", "api"}, with(common, map[string]string{
		"DATABASE_URL": withParam(dbURL, "pool_max_conns", "8"), "HTTP_ADDR": "127.0.0.1:0", "LOG_LEVEL": "info"}))
	if err != nil {
		return err
	}
	addr, err := api.waitLog("api listening", "addr", 60*time.Second) // after the migrations: the workers need River's tables
	if err != nil {
		return err
	}
	d.apiURL = "http://" + addr
	for i := 0; i < b.o.workers; i++ {
		if _, err := b.startProc(ctx, d, "river-worker", "worker", []string{self, "riverref", "worker"}, with(common, map[string]string{
			"DATABASE_URL": withParam(dbURL, "pool_max_conns", strconv.Itoa(b.o.concurrency)),
			"SMTP_HOST":    d.sink.Host(), "SMTP_PORT": strconv.Itoa(d.sink.Port()),
			"RIVER_MAX_WORKERS": strconv.Itoa(b.riverMaxWorkers()),
		})); err != nil {
			return err
		}
	}
	return nil
}

// riverMaxWorkers is each River worker's MaxWorkers: -river-workers, or
// sekali's WORKER_CONCURRENCY.
func (b *bench) riverMaxWorkers() int { return cmp.Or(b.o.riverWorkers, b.o.concurrency) }

// with is common with extra added (extra wins).
func with(common, extra map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range common {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// outcome is what the search found for one pipeline.
type outcome struct {
	pipeline        pipeline
	low, best, half step
	closed          step   // -closed clients, back to back (none when -closed is 0)
	steps           []step // the search and its refinement, by offered rate
	orders, emails  int
	dups            int
	redis           bool // the pipeline has a Redis (its CPU is counted)
	// redisPerK is Redis's used_memory at the end of the run, less what
	// it used before the first order, per 1,000 orders of the run.
	redisPerK float64
	capped    bool         // no rate tried was too much: best is a lower bound
	procs     []procResult // in the order of their CPU in the steps' cpuUse
}

// procResult is one process of a pipeline, as it ended the run.
type procResult struct {
	name, role string
	peakRSSKiB int
}

// measure deploys the pipeline, finds its maximum sustainable rate as
// docs/performance.md describes, counts its e-mails, and stops it.
func (b *bench) measure(ctx context.Context, p pipeline) (outcome, error) {
	b.logf("%s: starting", p.name)
	d, err := b.deploy(ctx, p, nil)
	if err != nil {
		return outcome{}, err
	}
	defer d.stop()
	out := outcome{pipeline: p}

	b.logf("%s: warm-up", p.name)
	if _, err := b.offer(ctx, d, 50, 2*time.Second); err != nil {
		return out, err
	}
	b.logf("%s: low load: %d/s for %v", p.name, b.o.lowRate, b.o.step)
	if out.low, err = b.offer(ctx, d, float64(b.o.lowRate), b.o.step); err != nil {
		return out, err
	}
	failed := step{}
	rate := b.o.startRate
	for i := 0; i < b.o.maxSteps; i++ {
		b.logf("%s: offering %.0f/s for %v", p.name, rate, b.o.step)
		s, err := b.offer(ctx, d, rate, b.o.step)
		if err != nil {
			return out, err
		}
		out.steps = append(out.steps, s)
		if !s.Sustainable {
			failed = s
			break
		}
		out.best = s
		rate *= b.o.growth
	}
	if out.best.Offered == 0 {
		return out, fmt.Errorf("%s: not even %.0f checkouts/s were sustainable", p.name, b.o.startRate)
	}
	if failed.Offered == 0 {
		out.capped = true // every rate tried was sustainable: the maximum is at least this
		b.logf("%s: all %d rates were sustainable; raise -max-steps to find the maximum", p.name, b.o.maxSteps)
	}
	// Narrow the gap between the last sustainable rate and the first
	// that was not, so the maximum is not understated by up to a growth
	// factor.
	for i := 0; i < b.o.refine && failed.Offered > 0; i++ {
		rate := (out.best.Offered + failed.Offered) / 2
		b.logf("%s: refining: offering %.0f/s for %v", p.name, rate, b.o.step)
		s, err := b.offer(ctx, d, rate, b.o.step)
		if err != nil {
			return out, err
		}
		out.steps = append(out.steps, s)
		if s.Sustainable {
			out.best = s
		} else {
			failed = s
		}
	}
	slices.SortFunc(out.steps, func(x, y step) int { return cmp.Compare(x.Offered, y.Offered) })
	b.logf("%s: half the maximum: %.0f/s", p.name, out.best.Offered/2)
	if out.half, err = b.offer(ctx, d, out.best.Offered/2, b.o.step); err != nil {
		return out, err
	}
	if b.o.closed > 0 {
		b.logf("%s: closed loop: %d clients for %v", p.name, b.o.closed, b.o.step)
		if out.closed, err = b.closedLoop(ctx, d, b.o.closed, b.o.step); err != nil {
			return out, err
		}
	}
	if out.emails, out.dups, out.orders, err = b.count(ctx, d); err != nil {
		return out, err
	}
	out.redis = d.redisPid != 0
	if d.redis != nil && out.orders > 0 {
		used, err := usedMemory(ctx, d.redis)
		if err != nil {
			return out, err
		}
		out.redisPerK = float64(used-d.redisBase) / float64(out.orders) * 1000
	}
	for _, pr := range d.procs { // before they stop
		out.procs = append(out.procs, procResult{name: pr.name, role: pr.role, peakRSSKiB: procUsage(pr.cmd.Process.Pid).PeakRSSKiB})
	}
	return out, nil
}

// usedMemory is Redis's used_memory, in bytes.
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("redis INFO memory: %w", err)
	}
	n, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redis used_memory: %w", err)
	}
	return n, nil
}
