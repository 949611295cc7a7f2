// Command bench measures the whole service on one machine: it starts the
// api, worker and reconciler binaries natively against PostgreSQL, a
// redis-server of its own and an in-process SMTP sink, offers checkouts at
// fixed rates (open loop: requests leave on schedule whether or not the
// earlier ones have answered), and reports latency, throughput, drain
// time, e-mails against orders, and the memory and CPU of each process.
// In the same run it measures, the same way, a reference pipeline built
// on River (riverref.go; `bench riverref api|worker` are its processes),
// and drives the same SQL straight at PostgreSQL, for the ceiling both
// are compared with. `make bench` runs it; docs/performance.md explains
// the method and keeps the results.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/sekali-dev/sekali/internal/logbuf"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	binDir      string
	databaseURL string
	step        time.Duration
	lowRate     int
	startRate   float64
	growth      float64
	maxSteps    int
	refine      int
	p99Bound    time.Duration
	workers     int
	concurrency int
	out         string
	plot        string
	profileDir  string
	onlyCeiling bool
	keys        bool // send an Idempotency-Key with every checkout
	closed      int  // clients of the closed-loop step; 0: none

	reference          bool // also measure the River reference
	onlyReference      bool
	riverWorkers       int // MaxWorkers of each River worker; 0: -concurrency
	riverFetchCooldown time.Duration
	riverFetchPoll     time.Duration

	// The provider-bound mode (provider.go): with provider set, the
	// only thing run.
	provider        string   // "resend"; "": the CPU-bound bench
	providerRate    int      // the stand-in's limit, requests a second, and RESEND_RATE
	orders          int      // checkouts placed at once
	providerBatches []string // PROVIDER_BATCHES settings, a run each
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "riverref" {
		return runRiverRef(ctx, args[1:], getenv, stdout)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.binDir, "bin", "bin", "directory holding the api, worker and reconciler binaries")
	fs.StringVar(&o.databaseURL, "db", cmp.Or(getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL server to create the benchmark databases on")
	fs.DurationVar(&o.step, "step", 10*time.Second, "how long each offered rate is held")
	fs.IntVar(&o.lowRate, "low-rate", 20, "checkouts/s of the low-load run (checkout-to-sent latency)")
	fs.Float64Var(&o.startRate, "start-rate", 50, "first rate of the search for the maximum sustainable rate")
	fs.Float64Var(&o.growth, "growth", 1.2, "factor between successive rates")
	fs.IntVar(&o.maxSteps, "max-steps", 30, "most rates tried (from -start-rate 50 at -growth 1.2, 30 reach 9900/s)")
	fs.IntVar(&o.refine, "refine", 2, "rates tried between the last sustainable and the first unsustainable one")
	fs.DurationVar(&o.p99Bound, "p99", 100*time.Millisecond, "API p99 a sustainable rate must stay under")
	fs.IntVar(&o.workers, "workers", 1, "worker processes")
	fs.IntVar(&o.concurrency, "concurrency", 16, "WORKER_CONCURRENCY of each worker, and the ceiling's parallel orders")
	fs.StringVar(&o.out, "out", "", "also write the report (Markdown) to this file")
	fs.StringVar(&o.plot, "plot", "", "write a PNG of latency and throughput against offered rate to this file")
	fs.BoolVar(&o.keys, "idempotency-key", true, "send a fresh Idempotency-Key with every checkout, as a shop's backend does")
	fs.IntVar(&o.closed, "closed", 32, "clients of the closed-loop step after the rate search: each places an order as soon as its last is answered (0: no such step)")
	fs.BoolVar(&o.onlyCeiling, "only-ceiling", false, "measure only the PostgreSQL ceiling, for -step, and print it")
	fs.StringVar(&o.profileDir, "profile", "", "write a CPU profile of each process for each rate into this directory (go tool pprof)")
	fs.BoolVar(&o.reference, "reference", true, "also measure the reference pipeline built on River, the same way (-reference=false: sekali only)")
	fs.BoolVar(&o.onlyReference, "only-reference", false, "measure only the River reference (and the ceiling), to tune it")
	fs.IntVar(&o.riverWorkers, "river-workers", 0, "MaxWorkers of each River worker process (0: the same as -concurrency)")
	fs.DurationVar(&o.riverFetchCooldown, "river-fetch-cooldown", 5*time.Millisecond, "River's FetchCooldown in the reference's processes (River's default is 100ms)")
	fs.DurationVar(&o.riverFetchPoll, "river-fetch-poll", 100*time.Millisecond, "River's FetchPollInterval in the reference's processes (River's default is 1s)")
	fs.StringVar(&o.provider, "provider", "", "provider-bound mode: the workers send through this provider's API (resend) to a stand-in limited to -provider-rate, instead of the CPU-bound bench")
	fs.IntVar(&o.providerRate, "provider-rate", 5, "provider-bound mode: requests a second the stand-in allows in all, and the workers' RESEND_RATE")
	fs.IntVar(&o.orders, "orders", 300, "provider-bound mode: checkouts placed at once")
	batches := fs.String("provider-batches", "off,on", "provider-bound mode: PROVIDER_BATCHES, on, off, or both (a run each)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := o.checkProvider(*batches); err != nil {
		return err
	}
	b := &bench{o: o, log: stderr, client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}}}
	report, err := b.run(ctx)
	if report != "" {
		fmt.Fprint(stdout, report)
		if o.out != "" {
			if werr := os.WriteFile(o.out, []byte(report), 0o644); werr != nil && err == nil {
				err = werr
			}
		}
	}
	return err
}

// bench is one run: what it measured, and what all its pipelines share.
type bench struct {
	o               options
	log             io.Writer
	profiles        int  // steps profiled so far (-profile)
	unsettled       bool // a VACUUM or CHECKPOINT was refused
	noLocalPostgres bool // no postgres process to count the CPU of
	client          *http.Client
	seq             atomic.Int64
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "bench: "+format+"\n", args...)
}

// step is what one offered rate produced.
type step struct {
	Offered, Achieved  float64
	Clients            int // a closed-loop step's clients (Offered is 0)
	Requests, Errors   int
	errorKinds         map[string]int // Errors by what came back: an HTTP status, or the client's error
	P50, P95, P99, Max time.Duration
	SentP50, SentP99   time.Duration
	Drain              time.Duration
	Sustainable        bool
	cpu                cpuUse // CPU used while the load ran
	// From the first request until the last e-mail was done, per order:
	// the WAL PostgreSQL wrote, and the row versions the pipeline's
	// table got (updates), of which HOT (no index touched).
	walPerOrder, updatesPerOrder, hotShare float64
	// ... the transactions PostgreSQL committed in the pipeline's database,
	// and the commands Redis ran (of which scripts), per order.
	commitsPerOrder, redisPerOrder, scriptsPerOrder float64
}

func (b *bench) run(ctx context.Context) (string, error) {
	if b.o.provider != "" {
		return b.runProvider(ctx)
	}
	if b.o.onlyCeiling {
		c, err := b.ceiling(ctx, b.o.step)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("PostgreSQL ceiling (same SQL, %d in flight): %.0f orders/s, %.2f ms CPU per order (PostgreSQL %.2f)\n",
			b.o.concurrency, c.rate, c.cpu.perOrder(c.cpu.own()), c.cpu.perOrder(c.cpu.postgres)), nil
	}
	pipelines := []pipeline{sekali}
	switch {
	case b.o.onlyReference:
		pipelines = []pipeline{riverReference}
	case b.o.reference:
		pipelines = append(pipelines, riverReference)
	}
	if len(b.sampleCPU(nil).postgres) == 0 {
		b.noLocalPostgres = true
		b.logf("no postgres process on this machine: PostgreSQL's CPU cannot be counted")
	}

	// The ceiling is measured before the first pipeline starts and
	// after the last has stopped, with none of their processes up: the
	// two bracket the run, and the ratios use their mean.
	b.logf("ceiling (before): the same SQL straight at PostgreSQL, %d at a time", b.o.concurrency)
	before, err := b.ceiling(ctx, b.o.step)
	if err != nil {
		return "", err
	}
	b.logf("  %.0f orders/s", before.rate)
	var outs []outcome
	for _, p := range pipelines {
		out, err := b.measure(ctx, p)
		if err != nil {
			return "", err
		}
		outs = append(outs, out)
	}
	b.logf("ceiling (after): the same SQL straight at PostgreSQL, %d at a time", b.o.concurrency)
	after, err := b.ceiling(ctx, b.o.step)
	if err != nil {
		return "", err
	}
	b.logf("  %.0f orders/s", after.rate)
	if b.o.plot != "" {
		if err := plot(b.o.plot, outs, b.o.p99Bound); err != nil {
			return "", err
		}
	}
	return b.report(outs, before, after), nil
}

func withParam(raw, k, v string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

// freshDatabase drops and creates a database on the server of o.databaseURL.
func (b *bench) freshDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, b.o.databaseURL)
	if err != nil {
		return "", fmt.Errorf("connect to %s (start PostgreSQL, or set -db): %w", b.o.databaseURL, err)
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return "", err
	}
	u, _ := url.Parse(b.o.databaseURL)
	u.Path = "/" + name
	return u.String(), nil
}

func (b *bench) startRedis(d *deployment) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "sekali-bench-redis-")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start redis-server: %w", err)
	}
	d.redisPid = cmd.Process.Pid
	d.cleanup = append(d.cleanup, func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); os.RemoveAll(dir) })
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
			return fmt.Sprintf("redis://127.0.0.1:%d/0", port), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "", fmt.Errorf("redis-server did not start")
}

// proc is one of a pipeline's processes.
type proc struct {
	name      string // its binary's name, or the reference's process
	role      string // api, worker or reconciler: the row it is counted in when pipelines are compared
	pprofAddr string // with -profile: where the process serves its profiles
	cmd       *exec.Cmd
	out       logbuf.Buffer
}

// startProc runs argv (the binary and its arguments) with env as one of
// d's processes.
func (b *bench) startProc(ctx context.Context, d *deployment, name, role string, argv []string, env map[string]string) (*proc, error) {
	p := &proc{name: name, role: role, cmd: exec.Command(argv[0], argv[1:]...)}
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if b.o.profileDir != "" {
		p.cmd.Env = append(p.cmd.Env, "PPROF_ADDR=127.0.0.1:0")
	}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d.procs = append(d.procs, p)
	if b.o.profileDir != "" {
		var err error
		if p.pprofAddr, err = p.waitLog("serving runtime profiles", "pprof_addr", 60*time.Second); err != nil {
			_ = p.cmd.Process.Kill()
			return nil, err
		}
	}
	d.cleanup = append(d.cleanup, func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	})
	return p, nil
}

func (p *proc) waitLog(msg, field string, timeout time.Duration) (string, error) {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if v, ok := p.out.Field(msg, field); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s did not log %q:\n%s", p.name, msg, p.out.String())
}

// offer sends checkouts at rate per second for d, open loop: request i
// leaves at start + i/rate, and its latency counts from then, so a
// stalled server cannot hide its stall by slowing the load down.
func (b *bench) offer(ctx context.Context, dep *deployment, rate float64, d time.Duration) (step, error) {
	return b.run1(ctx, dep, rate, 0, d)
}

// closedLoop is a step of clients that each place an order as soon as
// their previous one is answered, for d, as a shop's backend with that
// many workers does. Its rate counts until the last e-mail is done: the
// API alone may answer faster than the worker sends.
func (b *bench) closedLoop(ctx context.Context, dep *deployment, clients int, d time.Duration) (step, error) {
	return b.run1(ctx, dep, 0, clients, d)
}

// run1 is one step: open loop at rate when clients is 0, else closed
// loop with clients.
func (b *bench) run1(ctx context.Context, dep *deployment, rate float64, clients int, d time.Duration) (step, error) {
	s := step{Offered: rate, Clients: clients}
	b.settle(ctx, dep.pool, dep.offers > 0) // vacuum once there are orders
	dep.offers++
	cpuBefore := b.sampleCPU(dep)
	pgBefore, err := b.samplePG(ctx, dep)
	if err != nil {
		return s, err
	}
	redisBefore, err := sampleRedis(ctx, dep)
	if err != nil {
		return s, err
	}
	profiled := b.profile(ctx, dep, max(rate, float64(clients)), d)
	start := time.Now()
	var mu sync.Mutex
	var lats []time.Duration
	var wg sync.WaitGroup
	record := func(at time.Time) {
		failure := b.checkout(dep)
		lat := time.Since(at)
		mu.Lock()
		defer mu.Unlock()
		lats = append(lats, lat)
		if failure != "" {
			s.Errors++
			if s.errorKinds == nil {
				s.errorKinds = map[string]int{}
			}
			s.errorKinds[failure]++
		}
	}
	if clients > 0 {
		for range clients {
			wg.Go(func() {
				for at := time.Now(); at.Sub(start) < d && ctx.Err() == nil; at = time.Now() {
					record(at)
				}
			})
		}
	} else {
		interval := time.Duration(float64(time.Second) / rate)
		for i := 0; ; i++ {
			at := start.Add(time.Duration(i) * interval)
			if at.Sub(start) >= d {
				break
			}
			time.Sleep(time.Until(at))
			if ctx.Err() != nil {
				break
			}
			wg.Go(func() { record(at) })
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		_ = profiled()
		return s, ctx.Err()
	}
	loadEnd := time.Now()
	if err := profiled(); err != nil {
		return s, err
	}
	s.Requests = len(lats)
	slices.Sort(lats)
	s.P50, s.P95, s.P99, s.Max = pct(lats, 0.50), pct(lats, 0.95), pct(lats, 0.99), lats[len(lats)-1]

	// Drain: until every e-mail is done (sekali: nothing pending or
	// sending; River: every job finalized).
	for {
		var open int
		if err := dep.pool.QueryRow(ctx, dep.pipeline.openSQL).Scan(&open); err != nil {
			return s, err
		}
		if open == 0 {
			break
		}
		if time.Since(loadEnd) > 2*time.Minute {
			return s, fmt.Errorf("%d deliveries still open two minutes after the load stopped", open)
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := time.Now()
	s.Drain = done.Sub(loadEnd)
	// The open loop's rate is what the API took while the load ran. The
	// closed loop's clients wait for the API only: its rate is the
	// pipeline's, orders from the first checkout until the last e-mail.
	rateEnd := loadEnd
	if clients > 0 {
		rateEnd = done
	}
	s.Achieved = float64(s.Requests-s.Errors) / rateEnd.Sub(start).Seconds()
	// CPU from the first request until the last delivery was done: all
	// the work of the step's orders, and only theirs.
	s.cpu = b.sampleCPU(dep).since(cpuBefore, done.Sub(start), float64(s.Requests-s.Errors))
	pgAfter, err := b.samplePG(ctx, dep)
	if err != nil {
		return s, err
	}
	if orders := float64(s.Requests - s.Errors); orders > 0 {
		s.walPerOrder = float64(pgAfter.wal-pgBefore.wal) / orders
		s.updatesPerOrder = float64(pgAfter.updates-pgBefore.updates) / orders
		if u := pgAfter.updates - pgBefore.updates; u > 0 {
			s.hotShare = float64(pgAfter.hot-pgBefore.hot) / float64(u)
		}
		s.commitsPerOrder = float64(pgAfter.commits-pgBefore.commits) / orders
		redisAfter, err := sampleRedis(ctx, dep)
		if err != nil {
			return s, err
		}
		s.redisPerOrder = float64(redisAfter.calls-redisBefore.calls) / orders
		s.scriptsPerOrder = float64(redisAfter.scripts-redisBefore.scripts) / orders
	}
	var p50, p99 float64
	if err := dep.pool.QueryRow(ctx, dep.pipeline.sentSQL, start, loadEnd).Scan(&p50, &p99); err != nil {
		return s, err
	}
	s.SentP50, s.SentP99 = time.Duration(p50*float64(time.Second)), time.Duration(p99*float64(time.Second))
	// The backlog did not grow if the queue was (nearly) empty when the
	// load stopped: drained in half a second.
	s.Sustainable = s.Errors == 0 && s.P99 <= b.o.p99Bound && s.Drain <= 500*time.Millisecond && (clients > 0 || s.Achieved >= 0.95*rate)
	b.logf("  achieved %.0f/s, p50 %v p99 %v max %v, errors %d%s, drain %v, checkout→sent p50 %v p99 %v, sustainable %v",
		s.Achieved, ms(s.P50), ms(s.P99), ms(s.Max), s.Errors, kinds(s.errorKinds), ms(s.Drain), ms(s.SentP50), ms(s.SentP99), s.Sustainable)
	return s, nil
}

// pgSample is what PostgreSQL has written: WAL bytes since the server
// began, the updates (and HOT ones) of the pipeline's table, and the
// transactions committed in its database.
type pgSample struct{ wal, updates, hot, commits int64 }

// samplePG reads the WAL position and the table's update counters, after
// asking the statistics to be flushed.
func (b *bench) samplePG(ctx context.Context, dep *deployment) (pgSample, error) {
	var s pgSample
	_, _ = dep.pool.Exec(ctx, "SELECT pg_stat_force_next_flush()") // PostgreSQL 15+; older ones count a little late
	err := dep.pool.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint,
		coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0),
		(SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())
		FROM pg_stat_user_tables WHERE relname = $1`, dep.pipeline.table).Scan(&s.wal, &s.updates, &s.hot, &s.commits)
	if err != nil {
		return s, fmt.Errorf("sample PostgreSQL's WAL and updates: %w", err)
	}
	return s, nil
}

// redisSample is the commands Redis has run since it started, and the
// scripts among them (EVAL, EVALSHA).
type redisSample struct{ calls, scripts int64 }

// sampleRedis reads INFO commandstats of the pipeline's Redis; zero when
// it has none.
func sampleRedis(ctx context.Context, dep *deployment) (redisSample, error) {
	var s redisSample
	if dep.redis == nil {
		return s, nil
	}
	info, err := dep.redis.InfoMap(ctx, "commandstats").Result()
	if err != nil {
		return s, fmt.Errorf("redis INFO commandstats: %w", err)
	}
	for name, v := range info["Commandstats"] {
		// cmdstat_evalsha: calls=12,usec=34,...
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return s, fmt.Errorf("redis commandstats %s=%q: %w", name, v, err)
		}
		s.calls += n
		if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
			s.scripts += n
		}
	}
	return s, nil
}

// profile takes a CPU profile of each process for d while the rate is
// offered, when -profile is set; the returned function waits for them.
func (b *bench) profile(ctx context.Context, dep *deployment, rate float64, d time.Duration) func() error {
	if b.o.profileDir == "" {
		return func() error { return nil }
	}
	if err := os.MkdirAll(b.o.profileDir, 0o755); err != nil {
		return func() error { return err }
	}
	b.profiles++ // files are numbered: two steps may offer the same rate
	n := b.profiles
	name := func(proc string) string {
		return filepath.Join(b.o.profileDir, fmt.Sprintf("%02d-%s-%.0f.pprof", n, proc, rate))
	}
	var g errgroup.Group
	// The benchmark's own share: load generator and SMTP sink.
	self, err := os.Create(name("bench"))
	if err != nil {
		return func() error { return err }
	}
	if err := pprof.StartCPUProfile(self); err != nil {
		self.Close()
		return func() error { return err }
	}
	for i, p := range dep.procs {
		g.Go(func() error {
			u := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.pprofAddr, max(1, int(math.Ceil(d.Seconds()))))
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return err
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("profile %s: %w", p.name, err)
			}
			defer res.Body.Close()
			if res.StatusCode != http.StatusOK {
				return fmt.Errorf("profile %s: %s", p.name, res.Status)
			}
			f, err := os.Create(name(fmt.Sprintf("%s-%d", p.name, i)))
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, res.Body); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		})
	}
	return func() error {
		pprof.StopCPUProfile()
		return errors.Join(self.Close(), g.Wait())
	}
}

// kinds lists a step's errors by kind, " (503: 12, timeout: 3)", or
// nothing when there were none.
func kinds(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	names := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s: %d", n, m[n])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// checkout places one order and returns "" when it was created, else
// what came back instead: the HTTP status, or the client's error.
func (b *bench) checkout(d *deployment) string {
	n := b.seq.Add(1)
	body := `{"customer_email":"b` + strconv.FormatInt(n, 10) + `@example.com","customer_name":"Bench","currency":"IDR",` +
		`"items":[{"sku":"TEA-01","name":"Teh melati","quantity":2,"unit_price":4500000},{"sku":"CUP-02","name":"Cangkir","quantity":1,"unit_price":12500050}]}`
	req, _ := http.NewRequest(http.MethodPost, d.apiURL+"/v1/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if d.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+d.apiKey)
	}
	if b.o.keys {
		req.Header.Set("Idempotency-Key", "bench-"+strconv.FormatInt(n, 10))
	}
	res, err := b.client.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "timeout"
		}
		return "transport"
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode == http.StatusCreated {
		return ""
	}
	return strconv.Itoa(res.StatusCode)
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// count compares the sink with the database: e-mails, duplicates (more
// than one message for one Message-ID) and orders.
func (b *bench) count(ctx context.Context, d *deployment) (emails, dups, orders int, err error) {
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&orders); err != nil {
		return 0, 0, 0, err
	}
	perID := map[string]int{}
	for _, m := range d.sink.Messages() {
		perID[m.MessageID]++
	}
	for _, n := range perID {
		if n > 1 {
			dups += n - 1
		}
	}
	return d.sink.Count(), dups, orders, nil
}
