// Command devstack runs the whole stack on this machine, without Docker,
// for development: it is what `make run` starts once PostgreSQL and Redis
// run (scripts/services.sh) and the binaries are built. It makes the
// development database and its role if they are missing, starts Mailpit
// as the mail catcher (SMTP on 1025, web UI on 8025, as MailHog in the
// compose file) and then the API, the worker and the reconciler with a
// development configuration, each log line prefixed by its process. One
// line per process says where it listens. Ctrl-C stops them in order (the
// API first, so no checkout is taken that nobody sends; Mailpit last),
// each with the time its shutdown needs.
//
// PostgreSQL and Redis are the machine's: devstack leaves them running.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/redisconn"
)

// Where the stack listens: the compose file's ports, on loopback only.
const (
	apiAddr       = "127.0.0.1:8080"
	apiMetrics    = "127.0.0.1:9100"
	workerMetrics = "127.0.0.1:9101"
	reconcMetrics = "127.0.0.1:9102"
	mailpitSMTP   = "127.0.0.1:1025"
	mailpitUI     = "127.0.0.1:8025"
	adminToken    = "dev-admin-token-change-me" // as in docker-compose.yml
	defaultAdmin  = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	queue         = "notifications"
	startTimeout  = 60 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if errors.Is(err, flag.ErrHelp) { // asked for its usage
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

type options struct {
	bin         string // where api, worker, reconciler and mailpit are
	templates   string // TEMPLATES_DIR
	databaseURL string // DATABASE_URL of the three binaries
	adminURL    string // a superuser's URL, to make the role and database
	redisURL    string // REDIS_URL
}

func parse(args []string, getenv func(string) string) (options, error) {
	or := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var o options
	fs := flag.NewFlagSet("devstack", flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", "bin", "the directory of the built binaries and Mailpit")
	fs.StringVar(&o.templates, "templates", "deploy/templates", "the templates directory (TEMPLATES_DIR)")
	fs.StringVar(&o.databaseURL, "database-url", or("DATABASE_URL", postgres.DefaultURL), "the database of the three binaries (DATABASE_URL)")
	fs.StringVar(&o.adminURL, "admin-url", or("PG_ADMIN_URL", defaultAdmin), "a PostgreSQL superuser's URL, used only to make the role and database if they are missing (PG_ADMIN_URL)")
	fs.StringVar(&o.redisURL, "redis-url", or("REDIS_URL", redisconn.DefaultURL), "the Redis of the queue and the locks (REDIS_URL)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: devstack [flags]\n\n"+
			"What make run starts once the binaries are built: the development database and role if missing,\n"+
			"Mailpit, and the API, the worker and the reconciler with a development configuration; Ctrl-C stops them.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	o, err := parse(args, getenv)
	if err != nil {
		return err
	}
	out := &prefixer{w: stdout}
	made, err := ensureDatabase(ctx, o.databaseURL, o.adminURL)
	if err != nil {
		return err
	}
	if err := pingRedis(ctx, o.redisURL); err != nil {
		return err
	}
	if err := portsFree(apiAddr, apiMetrics, workerMetrics, reconcMetrics, mailpitSMTP, mailpitUI); err != nil {
		return err
	}
	out.say("postgres", "%s%s (the machine's; left running)", redact(o.databaseURL), made)
	out.say("redis", "%s (the machine's; left running)", o.redisURL)

	s := &stack{out: out, exited: make(chan *proc, 4)}
	defer s.stop()
	if err := s.startAll(ctx, o); err != nil {
		return err
	}
	out.say("mailpit", "the e-mails: http://%s (web UI and API), SMTP %s", mailpitUI, mailpitSMTP)
	api := filepath.Join(o.bin, "api")
	out.say("api", "http://%s; metrics http://%s/metrics", apiAddr, apiMetrics)
	out.say("api", "a key for checkouts: %s keys create --name local --scopes checkout,orders:read,orders:write", api)
	out.say("api", "the operator console: http://%s/admin/, with a key from %s keys create --name \"Your Name\" --scopes admin", apiAddr, api)
	out.say("api", "the admin API: Authorization: Bearer %s (development only), or an operator key", adminToken)
	out.say("api", "the templates of %s are read again when they change: an edit shows on the next preview (http://%s/templates) and send", o.templates, apiAddr)
	out.say("worker", "sends through Mailpit; metrics http://%s/metrics", workerMetrics)
	out.say("reconciler", "asks Mailpit about ambiguous sends; metrics http://%s/metrics", reconcMetrics)
	out.say("devstack", "sekali is running; Ctrl-C stops it")

	select {
	case <-ctx.Done():
		out.say("devstack", "stopping")
		s.stop()
		out.say("devstack", "stopped cleanly")
		return nil
	case p := <-s.exited:
		return fmt.Errorf("%s exited on its own (%w); the others are stopped", p.name, p.err)
	}
}

// env is the development configuration every binary gets, with its own
// on top: the compose file's, pointed at this machine.
func (o options) env(own ...string) []string {
	e := []string{
		"PATH=" + os.Getenv("PATH"),
		"DATABASE_URL=" + o.databaseURL,
		"REDIS_URL=" + o.redisURL,
		"TEMPLATES_DIR=" + o.templates,
		// An edited template shows on the next preview and send, without
		// a restart: for development only, never a default.
		"TEMPLATES_RELOAD=true",
		"TEMPLATES_DEFAULT_LANGUAGE=id",
		// The shop the e-mails' layout shows: the worker's mail and the
		// API's previews.
		"BRAND_NAME=Toko Ana",
		"BRAND_ADDRESS=Jl. Melati 7, Bandung 40115",
		"BRAND_SUPPORT_EMAIL=help@shop.example",
		"DELIVERY_QUEUE=" + queue,
		"LOG_LEVEL=info",
		"MAIL_FROM=orders@shop.example",
		// A shop's webhook receiver on this machine, for trying them out.
		"WEBHOOK_ALLOW_HTTP=true",
		"WEBHOOK_ALLOW_NETWORKS=127.0.0.0/8,::1/128",
	}
	return append(e, own...)
}

// stack is the processes devstack started, in the order they stop.
type stack struct {
	out    *prefixer
	mu     sync.Mutex
	procs  []*proc
	exited chan *proc // a process that ended before it was asked to
	once   sync.Once
}

func (s *stack) startAll(ctx context.Context, o options) error {
	steps := []struct {
		name  string
		argv  []string
		env   []string
		ready string // the log message that says it is up
		grace time.Duration
	}{
		{"mailpit", []string{filepath.Join(o.bin, "mailpit"), "--smtp", mailpitSMTP, "--listen", mailpitUI,
			"--disable-version-check", "--smtp-disable-rdns"}, []string{"PATH=" + os.Getenv("PATH")}, "", 10 * time.Second},
		{"api", []string{filepath.Join(o.bin, "api")}, o.env(
			"HTTP_ADDR="+apiAddr, "METRICS_ADDR="+apiMetrics, "ADMIN_TOKEN="+adminToken, "CHECKOUT_MODE=keyed",
			"SHUTDOWN_TIMEOUT=15s"), "api listening", 20 * time.Second},
		{"worker", []string{filepath.Join(o.bin, "worker")}, o.env(
			"METRICS_ADDR="+workerMetrics, "SMTP_HOST=127.0.0.1", "SMTP_PORT=1025", "SMTP_TLS=none",
			"SHUTDOWN_TIMEOUT=45s"), "worker started", 60 * time.Second},
		{"reconciler", []string{filepath.Join(o.bin, "reconciler")}, o.env(
			"METRICS_ADDR="+reconcMetrics, "RECONCILE_INTERVAL=5s", "MAIL_LOOKUP_URL=http://"+mailpitUI, "MAIL_LOOKUP_API=mailpit"),
			"reconciler started", 20 * time.Second},
	}
	for _, st := range steps {
		p, err := s.start(st.name, st.argv, st.env, st.ready, st.grace)
		if err != nil {
			return err
		}
		if err := p.waitReady(ctx, mailpitUI); err != nil {
			return err
		}
	}
	return nil
}

// start runs argv as one of the stack's processes, in a process group of
// its own, so that a Ctrl-C in the terminal reaches devstack alone and
// the processes stop in devstack's order.
func (s *stack) start(name string, argv, env []string, ready string, grace time.Duration) (*proc, error) {
	if _, err := os.Stat(argv[0]); err != nil {
		return nil, fmt.Errorf("%s: %w (make run builds it; run it through make)", name, err)
	}
	p := &proc{name: name, ready: ready, grace: grace, up: make(chan struct{}), done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = env
	p.cmd.SysProcAttr = sysProcAttr()
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	lines := make(chan struct{})
	go func() { defer close(lines); s.out.copy(name, r, p) }()
	go func() {
		if p.err = p.cmd.Wait(); p.err == nil {
			p.err = errors.New("exit status 0")
		}
		_ = w.Close()
		<-lines
		close(p.done)
		if !p.stopping() {
			s.exited <- p
		}
	}()
	return p, nil
}

// stop ends the processes in the order they started, Mailpit excepted:
// the API first, so that no checkout is taken that nobody sends, then
// the worker and the reconciler, then Mailpit, which the worker may still
// be sending to.
func (s *stack) stop() {
	s.once.Do(func() {
		s.mu.Lock()
		procs := s.procs
		s.mu.Unlock()
		for _, p := range procs {
			if p.ready != "" {
				p.stop(s.out)
			}
		}
		for _, p := range procs {
			p.stop(s.out)
		}
	})
}

// proc is one process of the stack.
type proc struct {
	name  string
	cmd   *exec.Cmd
	ready string        // the log message that says it is up; "" for Mailpit
	grace time.Duration // how long it may take to stop before it is killed
	up    chan struct{} // closed when it logged ready
	upOne sync.Once
	done  chan struct{} // closed when it exited and its output is written
	err   error         // why it ended (never nil), once done is closed

	mu    sync.Mutex
	asked bool // stop asked it to end
}

func (p *proc) stopping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked
}

// line is called for each line the process writes, before it is printed.
func (p *proc) line(msg string) {
	if p.ready != "" && msg == p.ready {
		p.upOne.Do(func() { close(p.up) })
	}
}

// waitReady waits for the process's ready line, or, for Mailpit, for its
// web UI to take connections.
func (p *proc) waitReady(ctx context.Context, uiAddr string) error {
	timeout := time.After(startTimeout)
	if p.ready == "" {
		for {
			if c, err := net.DialTimeout("tcp", uiAddr, time.Second); err == nil {
				_ = c.Close()
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-p.done:
				return fmt.Errorf("%s exited at start (%w); its last lines are above", p.name, p.err)
			case <-timeout:
				return fmt.Errorf("%s did not listen on %s within %s", p.name, uiAddr, startTimeout)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	select {
	case <-p.up:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return fmt.Errorf("%s exited at start (%w); its last lines are above", p.name, p.err)
	case <-timeout:
		return fmt.Errorf("%s did not log %q within %s", p.name, p.ready, startTimeout)
	}
}

// stop asks the process to end (SIGTERM) and kills it after its grace;
// it returns at once for a process that has ended.
func (p *proc) stop(out *prefixer) {
	p.mu.Lock()
	p.asked = true
	p.mu.Unlock()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		out.say(p.name, "stopped")
	case <-time.After(p.grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		out.say(p.name, "killed: it did not stop within %s", p.grace)
	}
}

// ensureDatabase connects to dbURL; if that fails, it makes its role
// (with its password) and database through a superuser's adminURL, as a
// fresh Debian PostgreSQL needs. It says what it made.
func ensureDatabase(ctx context.Context, dbURL, adminURL string) (string, error) {
	err := ping(ctx, dbURL)
	if err == nil {
		return "", nil
	}
	made, aerr := createRoleAndDatabase(ctx, adminURL, dbURL)
	if aerr != nil {
		return "", fmt.Errorf("PostgreSQL: %s: %w\nand making it through %s failed: %w\n(scripts/services.sh installs and starts PostgreSQL; PG_ADMIN_URL names a superuser who can make the role and database)",
			redact(dbURL), err, redact(adminURL), aerr)
	}
	if err := ping(ctx, dbURL); err != nil {
		return "", fmt.Errorf("PostgreSQL: made %s, but %s still fails: %w", made, redact(dbURL), err)
	}
	return " (made " + made + ")", nil
}

func pingRedis(ctx context.Context, redisURL string) error {
	opt, err := redisconn.Parse(redisURL)
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	c := redisconn.NewClient(opt)
	defer c.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w (scripts/services.sh installs and starts Redis)", redact(redisURL), err)
	}
	return nil
}

// portsFree fails, naming every one, if any of addrs is taken.
func portsFree(addrs ...string) error {
	var errs []error
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s is taken (is make run or docker compose already running?): %w", a, err))
			continue
		}
		_ = l.Close()
	}
	return errors.Join(errs...)
}

// redact hides a URL's password.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}
