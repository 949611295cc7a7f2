package testenv

// Mailpit is the real SMTP server, one we did not write, that the tests
// deliver to. What this file relies on was read in Mailpit's source
// ($(go env GOMODCACHE)/github.com/axllent/mailpit@v1.33.1; line numbers
// are of that version):
//
//   - Replies (internal/smtpd/smtpd.go): MAIL, RCPT, DATA and RSET before
//     STARTTLS when it is required: "530 5.7.0 Must issue a STARTTLS command
//     first" (:467), checked before authentication; MAIL, RCPT and DATA
//     without AUTH when credentials are configured: "530 5.7.0 Authentication
//     required" (:471); a wrong password: "535 5.7.8 Authentication
//     credentials invalid" (:856); a recipient refused by
//     --smtp-allowed-recipients: "550 5.1.0 Requested action not taken:
//     mailbox unavailable" (:584); MAIL FROM without angle brackets: "501
//     5.5.4 Syntax error in parameters or arguments (invalid FROM parameter)"
//     (:488); chaos: "<code> Chaos sender error" (:493), "<code> Chaos
//     recipient error" (:566), "<code> Chaos authentication error" (:827),
//     without an enhanced status code.
//   - EHLO (smtpd.go:1036) offers SIZE, STARTTLS, AUTH, ENHANCEDSTATUSCODES,
//     8BITMIME and SMTPUTF8, not PIPELINING (pipelined commands are still
//     answered in order, one line at a time). With an auth file it offers
//     AUTH PLAIN LOGIN before STARTTLS too, and then refuses AUTH with 530.
//   - An auth file makes STARTTLS required unless --smtp-auth-allow-insecure
//     is given (config/config.go:492-501), and without a certificate Mailpit
//     refuses to start unless it is (config.go:509).
//   - The auth file is htpasswd (internal/auth/auth.go, go-htpasswd with
//     every parser): "user:password" lines are plain-text passwords.
//   - A message is committed to the database before "250 2.0.0 Ok: queued
//     as <Mailpit ID>" is sent (internal/smtpd/main.go:134), so it can be
//     looked up as soon as the client has that reply.
//   - Messages with the same Message-ID are all kept (no
//     --ignore-duplicate-ids), so a duplicate delivery shows.
//   - GET /api/v1/info asks GitHub for the latest release unless
//     --disable-version-check (internal/stats/stats.go:100-116).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/buildinfo"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/mail"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"
)

// MailpitVersion is the Mailpit the tests are written against.
const MailpitVersion = "v1.33.1"

// MailpitOptions choose how a Mailpit is set up.
type MailpitOptions struct {
	// TLS offers STARTTLS with a certificate for 127.0.0.1 and localhost
	// signed by a fresh CA (Mailpit.CAFile) and, as a real relay does,
	// refuses MAIL, RCPT, DATA and AUTH until the client has used it.
	TLS bool
	// Auth maps users to plain-text passwords. With it, MAIL without AUTH
	// is refused. Without TLS, Mailpit has to be told to allow AUTH in
	// clear text (--smtp-auth-allow-insecure).
	Auth map[string]string
	// Chaos enables Mailpit's chaos triggers (SetChaos).
	Chaos bool
	// AllowedRecipients, a regular expression, makes Mailpit refuse every
	// other recipient with 550.
	AllowedRecipients string
}

// Mailpit is a Mailpit server of one test's own, on free loopback ports,
// with its database in the test's temporary directory.
type Mailpit struct {
	Host string // SMTP host, 127.0.0.1
	Port int    // SMTP port
	// URL is the HTTP base URL, e.g. http://127.0.0.1:8025 (what the
	// reconciler gets as MAIL_LOOKUP_URL); the API is under URL+"/api/v1".
	URL string
	// CAFile is the PEM file of the CA that signed the STARTTLS
	// certificate, "" without TLS. Give it to child processes as
	// SSL_CERT_FILE (Go reads that once per process) or as SMTP_CA_FILE.
	CAFile string

	opts   MailpitOptions
	bin    string
	args   []string
	client *http.Client

	mu   sync.Mutex
	proc *Process // nil while stopped
}

// StartMailpit starts a Mailpit and waits until its SMTP and HTTP ports
// answer. It is killed when the test ends, and its output is printed if
// the test failed. A missing Mailpit, or another version, fails the test.
func StartMailpit(t testing.TB, opts MailpitOptions) *Mailpit {
	t.Helper()
	bin := mailpitBinary(t)
	dir := t.TempDir()
	ports := FreePorts(t, 2)
	smtpPort, httpPort := ports[0], ports[1]
	m := &Mailpit{
		Host:   "127.0.0.1",
		Port:   smtpPort,
		URL:    "http://127.0.0.1:" + strconv.Itoa(httpPort),
		opts:   opts,
		bin:    bin,
		client: &http.Client{Timeout: 10 * time.Second},
	}
	m.args = []string{
		"--smtp", m.SMTPAddr(),
		"--listen", strings.TrimPrefix(m.URL, "http://"),
		// A file of our own, so that messages survive Stop and Start.
		"--database", filepath.Join(dir, "mailpit.db"),
		// By default Mailpit prunes to the newest 500 messages.
		"--max", "0",
		// Otherwise /api/v1/info asks GitHub for the latest release.
		"--disable-version-check",
		// The reverse lookup only names the client in the Received header.
		"--smtp-disable-rdns",
	}
	if opts.TLS {
		var cert, key string
		m.CAFile, cert, key = writeTestCA(t, dir)
		m.args = append(m.args, "--smtp-tls-cert", cert, "--smtp-tls-key", key, "--smtp-require-starttls")
	}
	if len(opts.Auth) > 0 {
		m.args = append(m.args, "--smtp-auth-file", writeAuthFile(t, dir, opts.Auth))
		if !opts.TLS {
			m.args = append(m.args, "--smtp-auth-allow-insecure")
		}
	}
	if opts.Chaos {
		m.args = append(m.args, "--enable-chaos")
	}
	if opts.AllowedRecipients != "" {
		m.args = append(m.args, "--smtp-allowed-recipients", opts.AllowedRecipients)
	}
	m.Start(t)
	return m
}

// SMTPAddr is host:port of the SMTP server.
func (m *Mailpit) SMTPAddr() string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }

// CertPool is a pool holding only the CA of CAFile, for a tls.Config's
// RootCAs in this process.
func (m *Mailpit) CertPool(t testing.TB) *x509.CertPool {
	t.Helper()
	if m.CAFile == "" {
		t.Fatal("CertPool needs MailpitOptions.TLS")
	}
	b, err := os.ReadFile(m.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("no certificate in %s", m.CAFile)
	}
	return pool
}

// Start starts a stopped Mailpit again, on the same ports and with the
// same database, and waits until it answers. The new process belongs to
// t: it is killed when t ends. Chaos triggers live in Mailpit's memory,
// so a restart turns them off.
func (m *Mailpit) Start(t testing.TB) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		t.Fatal("Mailpit is already running")
	}
	p := Start(t, "mailpit", m.bin, nil, m.args...)
	deadline := time.Now().Add(30 * time.Second)
	for !m.answers() {
		select {
		case <-p.Done():
			t.Fatalf("Mailpit exited (%v) before it answered on %s and %s", p.Err(), m.SMTPAddr(), m.URL)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("Mailpit did not answer on %s and %s within 30 s", m.SMTPAddr(), m.URL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	m.proc = p
}

// answers reports whether Mailpit's HTTP server is ready and its SMTP
// server greets. The greeting must be Mailpit's, so that whatever else
// took a port meanwhile is not taken for it.
func (m *Mailpit) answers() bool {
	resp, err := m.client.Get(m.URL + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	c, err := net.DialTimeout("tcp", m.SMTPAddr(), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	banner, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return false
	}
	_, _ = io.WriteString(c, "QUIT\r\n")
	return strings.HasPrefix(banner, "220 ") && strings.Contains(banner, " Mailpit ESMTP ")
}

// Stop stops Mailpit (SIGTERM, which closes its database; SIGKILL if it
// has not exited after 10 s) and checks that both ports refuse
// connections, as when the relay is down. Messages stay in its database.
func (m *Mailpit) Stop(t testing.TB) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		t.Fatal("Mailpit is not running")
	}
	p := m.proc
	m.proc = nil
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.Done()
	}
	// Kept-alive API connections led to the old process.
	m.client.CloseIdleConnections()
	for _, addr := range []string{m.SMTPAddr(), strings.TrimPrefix(m.URL, "http://")} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Fatalf("%s still accepts connections after Mailpit stopped", addr)
		}
	}
}

// MailpitTrigger makes Mailpit answer ErrorCode (400-599; 0 takes
// Mailpit's default, 451, or 535 for authentication) with Probability
// percent (0-100) chance.
type MailpitTrigger struct {
	ErrorCode   int
	Probability int
}

// MailpitChaos is the whole chaos configuration; a nil trigger is off.
// Sender fails MAIL FROM (after its syntax is checked), Recipient fails
// RCPT TO, Authentication fails AUTH (only with MailpitOptions.Auth).
type MailpitChaos struct {
	Sender, Recipient, Authentication *MailpitTrigger
}

// SetChaos replaces Mailpit's chaos triggers with c (PUT /api/v1/chaos,
// server/apiv1/chaos.go: a trigger left out is reset to off).
func (m *Mailpit) SetChaos(t testing.TB, c MailpitChaos) {
	t.Helper()
	if !m.opts.Chaos {
		t.Fatal("SetChaos needs MailpitOptions.Chaos")
	}
	want := map[string]*MailpitTrigger{"Sender": c.Sender, "Recipient": c.Recipient, "Authentication": c.Authentication}
	body := map[string]MailpitTrigger{}
	for k, tr := range want {
		if tr != nil {
			body[k] = *tr
		}
	}
	var got map[string]MailpitTrigger
	m.do(t, http.MethodPut, "/api/v1/chaos", body, &got)
	for k, tr := range body {
		if g := got[k]; g.Probability != tr.Probability || (tr.ErrorCode != 0 && g.ErrorCode != tr.ErrorCode) {
			t.Fatalf("Mailpit set chaos %s to %+v, want %+v", k, g, tr)
		}
	}
}

// ClearChaos turns every chaos trigger off.
func (m *Mailpit) ClearChaos(t testing.TB) {
	t.Helper()
	m.SetChaos(t, MailpitChaos{})
}

// MailpitMessage is a message as Mailpit lists it. Addresses come from
// the headers; Mailpit adds envelope recipients missing from To and Cc to
// Bcc (internal/smtpd/main.go:108-132), so To, Cc and Bcc together hold
// every envelope recipient.
type MailpitMessage struct {
	ID        string // Mailpit's own, for /api/v1/message/{ID}
	MessageID string // the Message-ID header without angle brackets
	From      string
	To        []string
	Cc        []string
	Bcc       []string
	Subject   string
	Username  string // the SMTP AUTH user it came with, "" without AUTH
	Created   time.Time
}

// Recipients is To, Cc and Bcc.
func (msg MailpitMessage) Recipients() []string {
	return slices.Concat(msg.To, msg.Cc, msg.Bcc)
}

// mailpitSummary is storage.MessageSummary in Mailpit's JSON.
type mailpitSummary struct {
	ID, MessageID, Subject, Username string
	From                             *mail.Address
	To, Cc, Bcc                      []*mail.Address
	Created                          time.Time
}

func (s mailpitSummary) message() MailpitMessage {
	addrs := func(as []*mail.Address) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.Address)
		}
		return out
	}
	msg := MailpitMessage{ID: s.ID, MessageID: s.MessageID, To: addrs(s.To), Cc: addrs(s.Cc), Bcc: addrs(s.Bcc),
		Subject: s.Subject, Username: s.Username, Created: s.Created}
	if s.From != nil {
		msg.From = s.From.Address
	}
	return msg
}

// Messages is every stored message, newest first.
func (m *Mailpit) Messages(t testing.TB) []MailpitMessage {
	t.Helper()
	return m.list(t, "/api/v1/messages", url.Values{})
}

// list reads every page of GET /api/v1/messages or /api/v1/search. Pages
// are offsets into a newest-first list, so a message arriving meanwhile
// pushes the rest down a place: it shows a message twice (dropped here by
// ID) but never skips one, as nothing deletes messages.
func (m *Mailpit) list(t testing.TB, path string, q url.Values) []MailpitMessage {
	t.Helper()
	const pageSize = 250
	seen := map[string]bool{}
	var all []MailpitMessage
	for start := 0; ; start += pageSize {
		q.Set("start", strconv.Itoa(start))
		q.Set("limit", strconv.Itoa(pageSize))
		var page struct {
			Messages []mailpitSummary `json:"messages"`
		}
		m.do(t, http.MethodGet, path+"?"+q.Encode(), nil, &page)
		for _, s := range page.Messages {
			if !seen[s.ID] {
				seen[s.ID] = true
				all = append(all, s.message())
			}
		}
		if len(page.Messages) < pageSize {
			return all
		}
	}
}

// CountByMessageID is how many stored messages have Message-ID id (with
// or without angle brackets). Mailpit's search "message-id:" matches a
// case-insensitive substring (internal/storage/search.go:419-427), so its
// results are narrowed to the exact id here.
func (m *Mailpit) CountByMessageID(t testing.TB, id string) int {
	t.Helper()
	id = strings.TrimSuffix(strings.TrimPrefix(id, "<"), ">")
	if id == "" {
		t.Fatal("CountByMessageID: empty Message-ID")
	}
	var msgs []MailpitMessage
	if strings.ContainsFunc(id, func(r rune) bool { return r == '"' || unicode.IsSpace(r) }) {
		// The search splits its query at spaces and drops quotes.
		msgs = m.Messages(t)
	} else {
		msgs = m.list(t, "/api/v1/search", url.Values{"query": {`message-id:"` + id + `"`}})
	}
	n := 0
	for _, msg := range msgs {
		if msg.MessageID == id {
			n++
		}
	}
	return n
}

// ByRecipient is every stored message addressed to addr (in To, Cc or
// Bcc; case-insensitive), newest first.
func (m *Mailpit) ByRecipient(t testing.TB, addr string) []MailpitMessage {
	t.Helper()
	var out []MailpitMessage
	for _, msg := range m.Messages(t) {
		if slices.ContainsFunc(msg.Recipients(), func(r string) bool { return strings.EqualFold(r, addr) }) {
			out = append(out, msg)
		}
	}
	return out
}

// Headers is the header of the message with Mailpit ID id, as stored:
// with the Received and Return-Path headers Mailpit adds.
func (m *Mailpit) Headers(t testing.TB, id string) mail.Header {
	t.Helper()
	var h mail.Header
	m.do(t, http.MethodGet, "/api/v1/message/"+url.PathEscape(id)+"/headers", nil, &h)
	return h
}

// Raw is the message with Mailpit ID id as it arrived: the bytes a
// signature is verified over (with the Received header Mailpit adds on
// top, which no signature covers).
func (m *Mailpit) Raw(t testing.TB, id string) []byte {
	t.Helper()
	resp, err := m.client.Get(m.URL + "/api/v1/message/" + url.PathEscape(id) + "/raw")
	if err != nil {
		t.Fatalf("Mailpit raw %s: %v", id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("Mailpit raw %s: %s %v: %s", id, resp.Status, err, b)
	}
	return b
}

// Count is the number of stored messages.
func (m *Mailpit) Count(t testing.TB) int {
	t.Helper()
	var page struct {
		Total int `json:"total"`
	}
	m.do(t, http.MethodGet, "/api/v1/messages?limit=1", nil, &page)
	return page.Total
}

// WaitForCount waits until Mailpit holds exactly n messages. It fails at
// once when it holds more, since messages are never removed: an extra
// delivery does not go away by waiting.
func (m *Mailpit) WaitForCount(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := m.Count(t)
		switch {
		case got == n:
			return
		case got > n:
			t.Fatalf("Mailpit holds %d messages, want %d", got, n)
		case time.Now().After(deadline):
			t.Fatalf("Mailpit holds %d messages after %v, want %d", got, timeout, n)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// do sends a request to Mailpit's API and decodes its JSON answer into out.
func (m *Mailpit) do(t testing.TB, method, path string, in, out any) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, m.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := m.client.Do(req)
	if err != nil {
		t.Fatalf("Mailpit %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("Mailpit %s %s: %v", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Mailpit %s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("Mailpit %s %s: decode %q: %v", method, path, b, err)
		}
	}
}

var mailpitBin struct {
	once sync.Once
	path string
	err  error
}

// mailpitBinary finds Mailpit, once per test binary: $MAILPIT_BIN, else
// bin/mailpit in the module, else mailpit on PATH.
func mailpitBinary(t testing.TB) string {
	t.Helper()
	root := filepath.Clean(moduleRoot(t))
	mailpitBin.once.Do(func() {
		mailpitBin.path, mailpitBin.err = findMailpit(root)
	})
	if mailpitBin.err != nil {
		t.Fatalf("the tests need Mailpit %s: %v\n"+
			"install it with `make mailpit`, which runs GOBIN=%s go install github.com/axllent/mailpit@%[1]s,\n"+
			"or point MAILPIT_BIN at a Mailpit %[1]s binary",
			MailpitVersion, mailpitBin.err, filepath.Join(root, "bin"))
	}
	return mailpitBin.path
}

func findMailpit(root string) (string, error) {
	if p := os.Getenv("MAILPIT_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("MAILPIT_BIN: %w", err)
		}
		return p, checkMailpitVersion(p)
	}
	p := filepath.Join(root, "bin", "mailpit")
	if _, err := os.Stat(p); err != nil {
		if p, err = exec.LookPath("mailpit"); err != nil {
			return "", fmt.Errorf("no %s and no mailpit on PATH", filepath.Join(root, "bin", "mailpit"))
		}
	}
	return p, checkMailpitVersion(p)
}

// checkMailpitVersion makes sure bin is Mailpit MailpitVersion. A binary
// made by go install reports "dev" to `mailpit version` (config.Version is
// set only by the release build's -ldflags), but its Go build info names
// the module version; a release binary is the other way round.
func checkMailpitVersion(bin string) error {
	bi, err := buildinfo.ReadFile(bin)
	if err == nil && bi.Main.Path == "github.com/axllent/mailpit" && bi.Main.Version == MailpitVersion {
		return nil
	}
	built := "no Go build info"
	if err == nil {
		built = "built from " + bi.Main.Path + "@" + bi.Main.Version
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Without --no-release-check it asks GitHub for the latest release.
	out, err := exec.CommandContext(ctx, bin, "version", "--no-release-check").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s (%s): version: %w: %s", bin, built, err, out)
	}
	if !slices.Contains(strings.Fields(string(out)), MailpitVersion) {
		return fmt.Errorf("%s is not Mailpit %s: %s, and it says %q", bin, MailpitVersion, built, strings.TrimSpace(string(out)))
	}
	return nil
}

// writeAuthFile writes users in the htpasswd format --smtp-auth-file
// takes. Mailpit splits the file at any white space (auth.go
// credentialsFromString) and go-htpasswd reads a password as a hash when
// it starts like one ($apr1$, $2y$, {SHA}, ...), so such names and
// passwords are refused here rather than silently never matching.
func writeAuthFile(t testing.TB, dir string, users map[string]string) string {
	t.Helper()
	var b strings.Builder
	for _, u := range slices.Sorted(maps.Keys(users)) {
		p := users[u]
		if u == "" || p == "" || strings.Contains(u, ":") || strings.ContainsFunc(u+p, unicode.IsSpace) ||
			strings.HasPrefix(p, "$") || strings.HasPrefix(p, "{") {
			t.Fatalf("Mailpit cannot hold user %q with password %q: no empty values, white space, ':' in the name, or '$' or '{' first in the password", u, p)
		}
		fmt.Fprintf(&b, "%s:%s\n", u, p)
	}
	file := filepath.Join(dir, "smtp-auth")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// writeTestCA makes a CA and a certificate it signs for 127.0.0.1, ::1 and
// localhost, and writes the CA's certificate and the server's certificate
// and key as PEM files into dir.
func writeTestCA(t testing.TB, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serialNumber(t),
		Subject:               pkix.Name{CommonName: "sekali test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(t),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}

	caFile = filepath.Join(dir, "ca.pem")
	certFile = filepath.Join(dir, "smtp-cert.pem")
	keyFile = filepath.Join(dir, "smtp-key.pem")
	writePEM(t, caFile, "CERTIFICATE", caDER, 0o644)
	writePEM(t, certFile, "CERTIFICATE", der, 0o644)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER, 0o600)
	return caFile, certFile, keyFile
}

func serialNumber(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, file, typ string, der []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), perm); err != nil {
		t.Fatal(err)
	}
}
