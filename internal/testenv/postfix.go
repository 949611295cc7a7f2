package testenv

// Postfix is the relay a shop runs, a server we did not write: Debian's
// package (3.7, `make postfix`, preseeded to "No configuration" so that
// it starts no system instance), one private instance per test. What
// this file relies on is in postconf(5), master(5), master(8) and
// anvil(8):
//
//   - `postfix -c dir check` creates the queue's directories under
//     queue_directory with their owners (mail_owner, setgid_group) from a
//     main.cf and master.cf in dir; `master -c dir -d` then runs the
//     instance in the foreground, so it is this test's child and dies with
//     it. Its daemons leave when the master does.
//   - The master, and the daemons it starts as mail_owner, must be started
//     by root (we run as root here, and so does CI): the postfix user must
//     be able to reach queue_directory, so its directory is 0755.
//   - maillog_file = /dev/stdout, with the postlog service in master.cf,
//     logs to the master's standard output, which the test keeps.
//   - smtpd on a loopback port is a master.cf line of its own
//     ("127.0.0.1:port inet … smtpd"); the daemons that a relay needs run
//     without chroot, so that nothing has to be copied into the queue.
//   - anvil's limits apply to every client not in
//     smtpd_client_event_limit_exceptions, which is $mynetworks by default
//     (loopback included): it is emptied here. anvil counts per client and
//     per anvil_rate_time_unit, starting at the client's first event:
//     connection attempts (smtpd_client_connection_rate_limit, a refused
//     one counted too), connections at once
//     (smtpd_client_connection_count_limit), MAIL FROM commands
//     (smtpd_client_message_rate_limit, whether taken or not). Over a
//     limit, smtpd answers "421 4.7.0 <host> Error: too many connections
//     from <addr>" (connections at once and per time alike) at the
//     greeting, "450 4.7.1 Error: too much mail from <addr>" to MAIL FROM,
//     and logs a warning naming the limit (PostfixConnectionCount, …).
//   - smtpd_timeout (300 s, 10 s when Postfix is under stress) is how long
//     an idle session is kept before "421 4.4.2 <host> Error: timeout
//     exceeded".

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The warnings Postfix logs when a client goes over one of anvil's
// limits, for Postfix.Count.
const (
	PostfixConnectionCount = "Connection concurrency limit exceeded"
	PostfixConnectionRate  = "Connection rate limit exceeded"
	PostfixMessageRate     = "Message delivery request rate limit exceeded"
	// PostfixConnect is logged once for every connection smtpd takes,
	// refused ones included.
	PostfixConnect = "]: connect from "
)

// PostfixOptions are the relay's limits on a client, as its
// administrator sets them in main.cf; a zero field keeps Postfix's
// default.
type PostfixOptions struct {
	MessageRateLimit     int           // smtpd_client_message_rate_limit: MAIL FROM commands per RateTimeUnit (default: none)
	ConnectionRateLimit  int           // smtpd_client_connection_rate_limit: connection attempts per RateTimeUnit (default: none)
	ConnectionCountLimit int           // smtpd_client_connection_count_limit: connections at once (default 50)
	RateTimeUnit         time.Duration // anvil_rate_time_unit, whole seconds (default 60 s)
	Timeout              time.Duration // smtpd_timeout: how long an idle session lasts (default 300 s)
}

// Postfix is a Postfix of one test's own on a free loopback port,
// relaying everything it takes to one SMTP server (a Mailpit of the
// test's).
type Postfix struct {
	Host string // 127.0.0.1
	Port int    // smtpd's port

	dir  string
	proc *Process
}

// StartPostfix starts a Postfix relaying to relayAddr (host:port) with
// opts' limits, waits until it answers, and stops it when the test ends
// (its log is printed if the test failed). A test that cannot start one
// fails, saying how to install it.
func StartPostfix(t testing.TB, relayAddr string, opts PostfixOptions) *Postfix {
	t.Helper()
	daemons := postfixDaemons(t)
	owner, err := user.Lookup("postfix")
	if err != nil {
		t.Fatalf("postfix: no postfix user (%v): install Postfix with make postfix (Debian's package creates it)", err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("postfix: its master must be started by root (it starts its daemons as the postfix user): run the tests as root, as CI does")
	}
	dir, err := os.MkdirTemp("", "sekali-postfix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	queue, data := filepath.Join(dir, "queue"), filepath.Join(dir, "data")
	for _, d := range []string{dir, queue, data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil { // the postfix user walks down to its queue
			t.Fatal(err)
		}
	}
	uid, _ := strconv.Atoi(owner.Uid)
	gid, _ := strconv.Atoi(owner.Gid)
	if err := os.Chown(data, uid, gid); err != nil {
		t.Fatal(err)
	}

	p := &Postfix{Host: "127.0.0.1", Port: FreePort(t), dir: dir}
	limits := map[string]string{"anvil_rate_time_unit": "60s", "smtpd_client_connection_count_limit": "50"}
	if opts.MessageRateLimit > 0 {
		limits["smtpd_client_message_rate_limit"] = strconv.Itoa(opts.MessageRateLimit)
	}
	if opts.ConnectionRateLimit > 0 {
		limits["smtpd_client_connection_rate_limit"] = strconv.Itoa(opts.ConnectionRateLimit)
	}
	if opts.ConnectionCountLimit > 0 {
		limits["smtpd_client_connection_count_limit"] = strconv.Itoa(opts.ConnectionCountLimit)
	}
	if opts.RateTimeUnit > 0 {
		limits["anvil_rate_time_unit"] = fmt.Sprintf("%ds", max(int(opts.RateTimeUnit/time.Second), 1))
	}
	if opts.Timeout > 0 {
		limits["smtpd_timeout"] = fmt.Sprintf("%ds", max(int(opts.Timeout/time.Second), 1))
	}
	var main strings.Builder
	fmt.Fprintf(&main, `compatibility_level = 3.6
queue_directory = %s
data_directory = %s
mail_owner = postfix
setgid_group = postdrop
maillog_file = /dev/stdout
myhostname = relay.sekali.test
mydomain = sekali.test
mydestination =
alias_maps =
alias_database =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination
smtpd_client_event_limit_exceptions =
relayhost = [%s]:%s
smtp_tls_security_level = none
smtpd_tls_security_level = none
biff = no
`, queue, data, hostOf(t, relayAddr), portOf(t, relayAddr))
	for k, v := range limits {
		fmt.Fprintf(&main, "%s = %s\n", k, v)
	}
	master := fmt.Sprintf(`127.0.0.1:%d inet n - n - - smtpd
pickup     unix  n - n 60    1 pickup
cleanup    unix  n - n -     0 cleanup
qmgr       unix  n - n 300   1 qmgr
rewrite    unix  - - n -     - trivial-rewrite
bounce     unix  - - n -     0 bounce
defer      unix  - - n -     0 bounce
trace      unix  - - n -     0 bounce
verify     unix  - - n -     1 verify
flush      unix  n - n 1000? 0 flush
proxymap   unix  - - n -     - proxymap
proxywrite unix  - - n -     1 proxymap
smtp       unix  - - n -     - smtp
relay      unix  - - n -     - smtp
showq      unix  n - n -     - showq
error      unix  - - n -     - error
retry      unix  - - n -     - error
discard    unix  - - n -     - discard
anvil      unix  - - n -     1 anvil
scache     unix  - - n -     1 scache
postlog    unix-dgram n - n - 1 postlogd
`, p.Port)
	for name, body := range map[string]string{"main.cf": main.String(), "master.cf": master} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("/usr/sbin/postfix", "-c", dir, "check").CombinedOutput(); err != nil {
		t.Fatalf("postfix -c %s check: %v\n%s", dir, err, out)
	}
	p.proc = Start(t, "postfix", filepath.Join(daemons, "master"), map[string]string{"MAIL_CONFIG": dir}, "-c", dir, "-d")
	t.Cleanup(func() { p.stop() })
	p.waitUntilAnswers(t)
	return p
}

// postfixDaemons is Postfix's daemon_directory, where master lives.
func postfixDaemons(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("/usr/sbin/postconf", "-d", "-h", "daemon_directory").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("postfix is not installed (postconf: %v): make postfix installs Debian's package without starting it", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "master")); err != nil {
		t.Fatalf("postfix is not installed (%v): make postfix installs Debian's package without starting it", err)
	}
	return dir
}

func hostOf(t testing.TB, addr string) string {
	t.Helper()
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("postfix: relay %q: %v", addr, err)
	}
	return h
}

func portOf(t testing.TB, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("postfix: relay %q: %v", addr, err)
	}
	return p
}

// Addr is host:port of its smtpd.
func (p *Postfix) Addr() string { return net.JoinHostPort(p.Host, strconv.Itoa(p.Port)) }

// waitUntilAnswers waits for the master's "daemon started", logged once
// its listening socket is open: a connection from then on waits in the
// socket's queue for smtpd. It makes no connection of its own, which
// anvil would count against the test's client.
func (p *Postfix) waitUntilAnswers(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(p.Log(), "daemon started") {
		select {
		case <-p.proc.Done():
			t.Fatalf("postfix exited (%v):\n%s", p.proc.Err(), p.proc.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("postfix on %s did not start:\n%s", p.Addr(), p.proc.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the instance as `postfix stop` does (SIGTERM to the master,
// which ends its daemons) and waits for it.
func (p *Postfix) stop() {
	_ = p.proc.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.proc.Done():
	case <-time.After(10 * time.Second):
		_ = p.proc.Cmd.Process.Kill()
		<-p.proc.Done()
	}
}

// Log is what the instance has logged so far.
func (p *Postfix) Log() string { return p.proc.Output() }

// Count counts the lines of its log that hold s (PostfixConnectionCount,
// PostfixConnect, …).
func (p *Postfix) Count(s string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(p.Log()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			n++
		}
	}
	return n
}
