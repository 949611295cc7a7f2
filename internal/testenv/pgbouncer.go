package testenv

// PgBouncer is the connection pooler operators put between the binaries
// and PostgreSQL, a server we did not write; the tests run Debian's
// (1.18, `apt-get install pgbouncer`). What this file relies on is in its
// manual pages, pgbouncer(1) and pgbouncer(5):
//
//   - pool_mode = transaction gives a client a server connection for one
//     transaction (or one statement outside a transaction) and then hands
//     that connection to the next client. 1.18 does not track named
//     prepared statements (max_prepared_statements came in 1.21), so a
//     statement prepared by one client lives on in a server connection
//     another client gets.
//   - default_pool_size is the number of server connections per database
//     and user; a client that finds them all busy waits (query_wait_timeout,
//     120 s by default).
//   - auth_type = trust still wants the user in auth_file; the password
//     given there is what PgBouncer logs in to the server with.
//   - It refuses to run as root ("PgBouncer should not run as root") unless
//     told which user to become (-u), which it does after reading its
//     configuration (so t.TempDir(), root's own, is fine). Changing user
//     clears the parent-death signal, so a test binary that dies without
//     its cleanups leaves that bouncer running, as it leaves a
//     PostgresCluster.
//   - The admin console is the database "pgbouncer", for admin_users, and
//     speaks only the simple query protocol: SHOW POOLS, SHOW CLIENTS,
//     SHOW SERVERS, RECONNECT, KILL db, RESUME db.
//   - server_round_robin = 1 hands out the server connection idle longest
//     rather than the one used last, so that a client's consecutive
//     transactions land on different server connections whenever there
//     are several: what a busy bouncer does anyway.
//   - server_login_retry (15 s by default) is how long it refuses clients
//     after a failed login to the server.

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncerOptions choose how a PgBouncer is set up.
type PgBouncerOptions struct {
	// PoolSize is default_pool_size: server connections to the database
	// (default 2, fewer than the binaries' pools hold, so that clients
	// really share them).
	PoolSize int
	// MaxClientConn is max_client_conn (default 100).
	MaxClientConn int
}

// PgBouncer is a PgBouncer of one test's own, in transaction pooling mode,
// in front of one test database on the server that database lives on.
type PgBouncer struct {
	// URL is the database's URL with the bouncer's host and port: what a
	// binary behind the bouncer gets as DATABASE_URL (sekali also needs
	// default_query_exec_mode=cache_describe there, see docs/deploy.md).
	URL string
	// AdminURL is the admin console (database "pgbouncer").
	AdminURL string
	Port     int

	db   string
	bin  string
	args []string

	mu   sync.Mutex
	proc *Process // nil while stopped
}

// NewPgBouncer starts a PgBouncer for db on a free loopback port, with its
// configuration in t.TempDir(), and waits until it answers. It is killed
// when the test ends, and its log is printed if the test failed. Without
// Debian's pgbouncer the test fails; it does not skip.
func NewPgBouncer(t testing.TB, db DB, opts PgBouncerOptions) *PgBouncer {
	t.Helper()
	bin := pgbouncerBinary(t)
	if opts.PoolSize == 0 {
		opts.PoolSize = 2
	}
	if opts.MaxClientConn == 0 {
		opts.MaxClientConn = 100
	}
	up, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatalf("pgbouncer: parse %s: %v", db.URL, err)
	}
	dir := t.TempDir()
	b := &PgBouncer{db: db.Name, bin: bin, Port: FreePort(t)}

	authFile := filepath.Join(dir, "users.txt")
	if err := os.WriteFile(authFile, []byte(quote(up.User)+" "+quote(up.Password)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ini := fmt.Sprintf(`[databases]
%s = host=%s port=%d dbname=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = transaction
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = %d
server_round_robin = 1
server_login_retry = 1
query_wait_timeout = 30
`, db.Name, up.Host, up.Port, db.Name, b.Port, authFile, up.User, opts.PoolSize, opts.MaxClientConn)
	iniFile := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(iniFile, []byte(ini), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			t.Fatalf("pgbouncer will not run as root, and there is no postgres user to run it as: %v", err)
		}
		b.args = append(b.args, "-u", "postgres")
	}
	b.args = append(b.args, iniFile)

	b.URL = withHostPort(t, db.URL, b.Port)
	b.AdminURL = withDatabase(t, b.URL, "pgbouncer")
	b.Start(t)
	t.Cleanup(func() { b.Stop(t) })
	return b
}

// pgbouncerBinary finds Debian's pgbouncer, which lives in /usr/sbin (not
// on every user's PATH).
func pgbouncerBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer"
	}
	t.Fatal("pgbouncer is not installed: apt-get install pgbouncer (make preflight does it)")
	return ""
}

// quote is a string as auth_file wants it: in double quotes, a double
// quote doubled.
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// withHostPort is raw pointed at 127.0.0.1:port, keeping its user,
// database and parameters (withDatabase points it at another database).
func withHostPort(t testing.TB, raw string, port int) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("pgbouncer: parse %s: %v", raw, err)
	}
	u.Host = "127.0.0.1:" + strconv.Itoa(port)
	return u.String()
}

// Start starts the bouncer (again, after Stop) on its port and waits until
// its admin console answers.
func (b *PgBouncer) Start(t testing.TB) {
	t.Helper()
	b.mu.Lock()
	if b.proc != nil {
		b.mu.Unlock()
		t.Fatal("pgbouncer is already running")
	}
	b.proc = Start(t, "pgbouncer", b.bin, nil, b.args...)
	proc := b.proc
	b.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := b.admin("SHOW VERSION")
		if err == nil {
			return
		}
		select {
		case <-proc.Done():
			t.Fatalf("pgbouncer exited (%v):\n%s", proc.Err(), proc.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer on port %d did not answer: %v\n%s", b.Port, err, proc.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the bouncer (SIGKILL), as a crash or a lost pod does: every
// client and server connection is cut.
func (b *PgBouncer) Stop(t testing.TB) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc == nil {
		return
	}
	_ = b.proc.Cmd.Process.Signal(syscall.SIGKILL)
	<-b.proc.Done()
	b.proc = nil
}

// Restart is Stop and Start: the same bouncer on the same port.
func (b *PgBouncer) Restart(t testing.TB) {
	t.Helper()
	b.Stop(t)
	b.Start(t)
}

// Admin runs one command on the admin console, e.g. "SHOW POOLS",
// "RECONNECT" or "KILL <db>", and returns the rows of its answer, each a
// map of column to text value.
func (b *PgBouncer) Admin(t testing.TB, command string) []map[string]string {
	t.Helper()
	rows, err := b.admin(command)
	if err != nil {
		t.Fatalf("pgbouncer admin %q: %v", command, err)
	}
	return rows
}

func (b *PgBouncer) admin(command string) ([]map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(b.AdminURL)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	results, err := conn.PgConn().Exec(ctx, command).ReadAll() // the simple protocol, the only one the console speaks
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, r := range results {
		for _, row := range r.Rows {
			m := make(map[string]string, len(row))
			for i, f := range r.FieldDescriptions {
				m[f.Name] = string(row[i])
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// Pool is the bouncer's SHOW POOLS row for its database: cl_active,
// cl_waiting, sv_active, sv_idle, ...
func (b *PgBouncer) Pool(t testing.TB) map[string]string {
	t.Helper()
	for _, p := range b.Admin(t, "SHOW POOLS") {
		if p["database"] == b.db {
			return p
		}
	}
	t.Fatalf("pgbouncer has no pool for %s", b.db)
	return nil
}
