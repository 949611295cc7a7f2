package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/testenv"
)

// On a fresh PostgreSQL, the role and the database of DATABASE_URL are
// made through the superuser's URL, once; a second start finds them.
func TestEnsureDatabaseMakesRoleAndDatabaseOnce(t *testing.T) {
	t.Parallel()
	admin := testenv.DatabaseURL()
	name := fmt.Sprintf("devstack_%d", time.Now().UnixNano())
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, "it's secret")
	u.Path = "/" + name
	dbURL := u.String()
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		for _, q := range []string{"DROP DATABASE IF EXISTS " + name + " WITH (FORCE)", "DROP ROLE IF EXISTS " + name} {
			if _, err := conn.Exec(context.Background(), q); err != nil {
				t.Error(err)
			}
		}
	})
	made, err := ensureDatabase(context.Background(), dbURL, admin)
	if err != nil {
		t.Fatal(err)
	}
	if made != " (made role "+name+" and database "+name+")" {
		t.Errorf("first start made %q", made)
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	var owner string
	err = conn.QueryRow(context.Background(), "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()").Scan(&owner)
	_ = conn.Close(context.Background())
	if err != nil || owner != name {
		t.Errorf("the database is owned by %q (%v), want %s", owner, err, name)
	}
	if made, err := ensureDatabase(context.Background(), dbURL, admin); err != nil || made != "" {
		t.Errorf("second start: made %q, %v; want nothing made", made, err)
	}
}

// A PostgreSQL that refuses both URLs is an error that names both,
// without their passwords, and says what to do.
func TestEnsureDatabaseSaysWhatFailed(t *testing.T) {
	t.Parallel()
	addr := testenv.RefusedAddr(t)
	_, err := ensureDatabase(context.Background(), "postgres://sekali:hunter2@"+addr+"/sekali", "postgres://postgres:rootpw@"+addr+"/postgres")
	if err == nil {
		t.Fatal("no error with nothing listening")
	}
	for _, want := range []string{"sekali:xxxxx@" + addr, "postgres:xxxxx@" + addr, "scripts/services.sh", "PG_ADMIN_URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	for _, secret := range []string{"hunter2", "rootpw"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q shows a password", err)
		}
	}
}

// Every taken port is named, not only the first.
func TestPortsFreeNamesEveryTakenPort(t *testing.T) {
	t.Parallel()
	var addrs []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	err := portsFree(addrs...)
	for _, a := range addrs {
		if err == nil || !strings.Contains(err.Error(), a+" is taken") {
			t.Errorf("portsFree = %v, want it to name %s", err, a)
		}
	}
}

// The binaries' JSON lines read as time, level, message and sorted
// fields; anything else (Mailpit's lines) is printed as it came.
func TestReadable(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 17, 4, 56, 0, time.UTC)
	cases := []struct{ in, want, msg string }{
		{`{"time":"` + at.Format(time.RFC3339Nano) + `","level":"INFO","msg":"api listening","service":"api","addr":"127.0.0.1:8080","n":3}`,
			at.Local().Format("15:04:05") + ` INFO  api listening addr=127.0.0.1:8080 n=3`, "api listening"},
		{`{"level":"WARN","msg":"x","reason":"two words","nested":{"a":1}}`, `WARN  x nested={"a":1} reason="two words"`, "x"},
		{`time="2026/12/01" level=info msg="[smtpd] starting"`, `time="2026/12/01" level=info msg="[smtpd] starting"`, ""},
		{`{not json`, `{not json`, ""},
	}
	for _, c := range cases {
		if got, msg := readable(c.in); got != c.want || msg != c.msg {
			t.Errorf("readable(%s) = %q, %q; want %q, %q", c.in, got, msg, c.want, c.msg)
		}
	}
}

// stoppedInOrder checks that the stack's output says each of names
// stopped, in that order.
func stoppedInOrder(t *testing.T, log string, names ...string) {
	t.Helper()
	last := -1
	for _, name := range names {
		i := strings.Index(log, fmt.Sprintf("%-10s | stopped\n", name))
		if i < 0 || i < last {
			t.Errorf("%s stopped at offset %d of the output, before the one before it (%d), or never:\n%s", name, i, last, log)
		}
		last = i
	}
}

// script is a process that logs ready as the binaries do, then waits
// for SIGTERM and says so.
func script(ready string) []string {
	return []string{"/bin/sh", "-c", `trap 'echo got TERM; exit 0' TERM; echo '{"level":"INFO","msg":"` + ready + `"}'; while :; do sleep 0.05; done`}
}

// The stack stops the binaries in the order they started and Mailpit
// (the process without a ready line) last; one that ends on its own is
// reported, not taken for a stop.
func TestStackStopsInOrderAndReportsAnExit(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	s := &stack{out: &prefixer{w: &out}, exited: make(chan *proc, 4)}
	ui, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ui.Close()
	for _, st := range []struct{ name, ready string }{{"mailpit", ""}, {"api", "api listening"}, {"worker", "worker started"}} {
		p, err := s.start(st.name, script(st.ready), nil, st.ready, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.waitReady(context.Background(), ui.Addr().String()); err != nil {
			t.Fatal(err)
		}
	}
	crash, err := s.start("reconciler", []string{"/bin/sh", "-c", "echo boom; exit 3"}, nil, "reconciler started", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := crash.waitReady(context.Background(), ui.Addr().String()); err == nil || !strings.Contains(err.Error(), "exited at start") {
		t.Errorf("a process that exits at start: %v", err)
	}
	select {
	case p := <-s.exited:
		if p != crash {
			t.Errorf("%s reported as exited, want the reconciler", p.name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the exit was not reported")
	}
	s.stop()
	log := out.String()
	stoppedInOrder(t, log, "api", "worker", "mailpit")
	if !strings.Contains(log, "api        | INFO  api listening") || !strings.Contains(log, "reconciler | boom") {
		t.Errorf("the processes' lines are not all there, prefixed:\n%s", log)
	}
	select {
	case p := <-s.exited:
		t.Errorf("%s reported as exited on its own after stop asked it to", p.name)
	default:
	}
}

// `devstack --help` prints its usage and flags, and asks main to exit 0
// (flag.ErrHelp), without starting anything.
func TestHelp(t *testing.T) {
	t.Parallel()
	_, err := parse([]string{"--help"}, func(string) string { return "" })
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("devstack --help: %v, want flag.ErrHelp", err)
	}
}

// The README says, right after its first commands, that their e-mail is
// in Indonesian and why: the checkout it shows has no locale, and make
// run's default language is id.
func TestTheReadmeSaysWhereTheFirstEmailsLanguageComesFrom(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i := strings.Index(readme, "bin/api keys create --name local")
	if i < 0 {
		t.Fatal("README.md has no first commands (bin/api keys create --name local)")
	}
	block, after, _ := strings.Cut(readme[i:], "```\n")
	next, _, _ := strings.Cut(after, "```")
	for _, want := range []string{"in Indonesian", "`locale`", "TEMPLATES_DEFAULT_LANGUAGE", `"locale":"en"`} {
		if !strings.Contains(next, want) {
			t.Errorf("the README's paragraph after its first commands does not say %s:\n%s", want, next)
		}
	}
	if strings.Contains(block, "locale") {
		t.Error("the README's first checkout has a locale: its e-mail is not in the default language")
	}
	if !slices.Contains(options{}.env(), "TEMPLATES_DEFAULT_LANGUAGE=id") {
		t.Error("make run's default language is not id, as the README says")
	}
}

// make run reads the templates again when they change (TEMPLATES_RELOAD),
// and only make run: it is no binary's default.
func TestMakeRunReloadsTemplates(t *testing.T) {
	t.Parallel()
	if !slices.Contains(options{}.env(), "TEMPLATES_RELOAD=true") {
		t.Error("make run's binaries do not read their templates again when they change")
	}
}
