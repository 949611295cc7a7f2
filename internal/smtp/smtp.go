// Package smtp is the SMTP mail provider: it implements mail.Provider
// over any SMTP relay (a provider's SMTP endpoint, Postfix, Mailpit),
// with the TLS policy, the composition of the MIME message, a pool of
// kept connections, and the classification of every refusal by where in
// the session it came and its enhanced status code.
package smtp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gomail "github.com/wneessen/go-mail"
	gosmtp "github.com/wneessen/go-mail/smtp"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailmime"
)

// TLS policies for the SMTP connection.
const (
	TLSNone     = "none"     // plain text: loopback and development sinks only
	TLSStartTLS = "starttls" // STARTTLS required; refuse a server without it
	TLSImplicit = "tls"      // TLS from the first byte (usually port 465)
)

// devHosts may be reached without TLS: the compose stack's sinks.
var devHosts = map[string]bool{"localhost": true, "mailhog": true, "mailpit": true}

// Config configures the SMTP provider.
type Config struct {
	Host              string
	Port              int
	Username          string
	Password          string
	TLS               string // TLSNone, TLSStartTLS or TLSImplicit
	From              string // MAIL_FROM: the header sender, with a display name or without; its address is the envelope sender
	HeloName          string // our name in EHLO: this machine's (HeloName() when empty), never the sender's domain
	CAFile            string // optional PEM bundle trusted besides the system's roots
	IdempotencyHeader string // header that carries the idempotency key, for a relay that deduplicates by it; "" sends none; Resend-Idempotency-Key carries mail.ProviderKey of it
	MetadataHeader    string // optional header that carries the key's hash, e.g. X-PM-Metadata-sekali-key for Postmark's look-up
	Timeout           time.Duration
	MaxIdle           int // connections kept open for reuse
	// IdleTimeout closes a kept connection idle this long
	// (SMTP_IDLE_TIMEOUT): a relay counts idle connections against its
	// cap on connections at once, and drops them itself only after its
	// own timeout (Postfix's smtpd_timeout, 300 s).
	IdleTimeout time.Duration
	// Connections is the most connections open at once (SMTP_CONNECTIONS,
	// DefaultConnections when 0); within it the bound is learned (conns.go).
	Connections int
	DKIM        DKIM // the shop's signature; off when empty
}

// DefaultIdleTimeout is SMTP_IDLE_TIMEOUT's default: long enough to
// carry a connection from one message of a steady flow to the next,
// well under a relay's own idle timeout (Postfix's smtpd_timeout is
// 300 s, and 10 s under stress).
const DefaultIdleTimeout = 10 * time.Second

// Validate checks the configuration, including the TLS policy.
func (c Config) Validate() error {
	var errs []error
	if c.Host == "" {
		errs = append(errs, errors.New("SMTP_HOST must be set"))
	}
	if c.Port < 1 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("SMTP_PORT %d is not a port", c.Port))
	}
	switch c.TLS {
	case TLSStartTLS, TLSImplicit:
	case TLSNone:
		if !plainTextAllowed(c.Host) {
			errs = append(errs, fmt.Errorf("SMTP_TLS=none is only allowed for loopback or development hosts (localhost, mailhog, mailpit), not %q; use starttls or tls", c.Host))
		}
	default:
		errs = append(errs, fmt.Errorf("SMTP_TLS %q: want none, starttls or tls", c.TLS))
	}
	if _, err := mail.ParseSender(c.From); err != nil {
		errs = append(errs, fmt.Errorf("MAIL_FROM: %w", err))
	}
	if _, err := c.DKIM.signer(c.From); err != nil {
		errs = append(errs, err)
	}
	if c.HeloName != "" && !validHeloName(c.HeloName) {
		errs = append(errs, fmt.Errorf("SMTP_HELO %q: want this machine's domain name or an address literal such as [192.0.2.1]", c.HeloName))
	}
	if c.CAFile != "" {
		if _, err := loadRoots(c.CAFile); err != nil {
			errs = append(errs, fmt.Errorf("SMTP_CA_FILE: %w", err))
		}
	}
	if c.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("SMTP_IDLE_TIMEOUT %v: must not be negative", c.IdleTimeout))
	}
	if c.IdempotencyHeader != "" && (textproto.CanonicalMIMEHeaderKey(c.IdempotencyHeader) == "" || strings.ContainsAny(c.IdempotencyHeader, " :\r\n")) {
		errs = append(errs, fmt.Errorf("SMTP_IDEMPOTENCY_HEADER %q is not a header name", c.IdempotencyHeader))
	}
	if c.MetadataHeader != "" && strings.ContainsAny(c.MetadataHeader, " :\r\n") {
		errs = append(errs, fmt.Errorf("SMTP_METADATA_HEADER %q is not a header name", c.MetadataHeader))
	}
	return errors.Join(errs...)
}

// validHeloName accepts what RFC 5321 §4.1.1.1 allows after EHLO: a
// domain name, or an address literal in brackets.
func validHeloName(name string) bool {
	if strings.HasPrefix(name, "[") && strings.HasSuffix(name, "]") {
		inner := strings.TrimPrefix(name[1:len(name)-1], "IPv6:")
		return net.ParseIP(inner) != nil
	}
	return mail.IsHostName(name)
}

// HeloName is the default EHLO name: the machine's host name when it is
// one a server accepts, else "localhost".
func HeloName() string {
	if h, err := os.Hostname(); err == nil && validHeloName(h) {
		return h
	}
	return "localhost"
}

// loadRoots returns the system's trusted roots plus the certificates in
// the PEM file at path.
func loadRoots(path string) (*x509.CertPool, error) {
	pemBytes, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

func plainTextAllowed(host string) bool {
	if devHosts[strings.ToLower(host)] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Provider sends through an SMTP server, keeping connections open
// between messages so that a busy worker does not pay a handshake per
// e-mail: at most MaxIdle, each closed once idle for IdleTimeout. It
// implements mail.Provider.
type Provider struct {
	cfg    Config
	sender mail.Sender        // MAIL_FROM: the From header's, under a template's name
	from   string             // its address, normalized; sent as MAIL FROM:<from>
	dkim   *gomail.DKIMSigner // nil: no signature
	roots  *x509.CertPool

	mu     sync.Mutex
	idle   []*smtpConn // kept, the one used last at the end
	closed bool
	// The connections open (in use and kept) and their bound, learned
	// from the relay's refusals (conns.go); wake is closed when a
	// connection is kept or closed, or the bound grows.
	open, bound int
	pacedAt     time.Time // when the relay last refused a connection or a message for pace
	delivered   int       // messages taken since the bound last changed, or the relay last refused one for pace
	waited      bool      // a send waited for a connection since
	wake        chan struct{}
	// senderRefused: the last MAIL FROM was refused, not for pace (our
	// sender, our account): the probe asks MAIL FROM until one passes.
	senderRefused atomic.Bool
}

// smtpConn is a client and the connection under it, whose deadline the
// provider sets itself, in absolute time.
type smtpConn struct {
	*gosmtp.Client
	conn   net.Conn
	expiry *time.Timer // while kept: closes it after IdleTimeout
	kept   int         // how many times it was kept, which tells its expiry from an earlier one
}

// New returns an SMTP provider; cfg must be valid.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxIdle <= 0 {
		cfg.MaxIdle = 1
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Connections <= 0 {
		cfg.Connections = DefaultConnections
	}
	if cfg.HeloName == "" {
		cfg.HeloName = HeloName()
	}
	sender, _ := mail.ParseSender(cfg.From)
	dkim, _ := cfg.DKIM.signer(cfg.From) // checked by Validate
	s := &Provider{cfg: cfg, sender: sender, from: sender.Address, dkim: dkim, bound: min(initialConnections, cfg.Connections), wake: make(chan struct{})}
	if cfg.CAFile != "" {
		s.roots, _ = loadRoots(cfg.CAFile) // checked by Validate
	}
	return s, nil
}

// Close closes the kept connections; a connection given back later is
// closed too.
func (s *Provider) Close() {
	s.mu.Lock()
	idle := s.idle
	s.idle, s.closed = nil, true
	s.mu.Unlock()
	for _, c := range idle {
		c.expiry.Stop()
		s.discard(c, true)
	}
}

// Send implements mail.Provider.
func (s *Provider) Send(ctx context.Context, m mail.Message, handOver func() error) (string, error) {
	raw, err := s.compose(m)
	if err != nil {
		return "", &mail.SendError{Outcome: mail.OutcomePermanent, Stage: mail.StageData, Err: fmt.Errorf("compose message: %w", err)}
	}
	// A kept connection may have been closed by the server while idle,
	// with or without a 421: if it fails before the data, try once more
	// on a fresh one.
	for try := 0; ; try++ {
		var c *smtpConn
		reused := false
		// After a kept one failed, not another kept one: they may all be dead.
		c, reused, err = s.conn(ctx, try == 0)
		if err != nil {
			return "", err
		}
		id, err := s.transact(ctx, c, m, raw, handOver)
		var se *mail.SendError
		if reused && try == 0 && errors.As(err, &se) && se.Outcome == mail.OutcomeUnavailable && (se.Reply.Code == 0 || se.Reply.Code == 421) && !se.HandedOver {
			continue
		}
		return id, err
	}
}

// Probe implements mail.Provider without a connection more than the
// relay already counts, and without a message of the relay's: a kept
// connection that answers is reused; one that does not is closed, and
// only when none is left is a new one opened (TLS and AUTH included),
// then kept for the next send. It asks NOOP, not MAIL FROM, which a relay
// counts as a message (Postfix's smtpd_client_message_rate_limit counts
// every one, taken or refused) — save when the last refusal of our
// session was of MAIL FROM itself (our sender, not the relay's pace,
// which is no refusal of us): only a MAIL FROM, reset at once, can tell
// whether that one is over.
func (s *Provider) Probe(ctx context.Context) error {
	check := func(c *smtpConn) error {
		if err := c.Noop(); err != nil {
			return smtpError(mail.StageConnect, err, "")
		}
		return nil
	}
	if s.senderRefused.Load() {
		check = func(c *smtpConn) error {
			if err := c.Mail("<" + s.from + ">"); err != nil {
				return smtpError(mail.StageSender, err, "")
			}
			s.senderRefused.Store(false)
			if err := c.Reset(); err != nil {
				return smtpError(mail.StageSender, err, "")
			}
			return nil
		}
	}
	for c := s.take(); c != nil; c = s.take() {
		if err := c.conn.SetDeadline(s.deadline(ctx, time.Now())); err != nil {
			s.discard(c, false)
			continue
		}
		err := check(c)
		var se *mail.SendError
		switch {
		case err == nil:
			s.put(c)
			return nil
		case errors.As(err, &se) && se.Reply.Code != 0 && se.Reply.Code != 421:
			// The relay answered, and refused: that is the probe's answer.
			if c.Reset() == nil {
				s.put(c)
			} else {
				s.discard(c, false)
			}
			return err
		}
		s.discard(c, false) // closed under us: try the next, or a new one
	}
	c, _, err := s.conn(ctx, false)
	if err != nil {
		return err
	}
	if err := check(c); err != nil {
		s.discard(c, false)
		return err
	}
	s.put(c)
	return nil
}

// deadline is when an exchange begun now must be over: SMTP_TIMEOUT from
// now, or the caller's deadline if that is sooner.
func (s *Provider) deadline(ctx context.Context, now time.Time) time.Time {
	d := now.Add(s.cfg.Timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}

// transact runs one SMTP transaction on c and puts c back when it is
// still usable.
func (s *Provider) transact(ctx context.Context, c *smtpConn, m mail.Message, raw []byte, handOver func() error) (string, error) {
	handedOver := false
	fail := func(stage mail.Stage, err error) (string, error) {
		se := smtpError(stage, err, m.To)
		se.HandedOver = handedOver
		s.mu.Lock()
		s.paced(se)
		s.mu.Unlock()
		if stage == mail.StageSender && se.Outcome == mail.OutcomeUnavailable {
			s.senderRefused.Store(true)
		}
		// A refusal ends the transaction, not the connection; 421 means
		// the server is closing it, and anything without a code left it in
		// an unknown state.
		if se.Reply.Code != 0 && se.Reply.Code != 421 && se.Outcome != mail.OutcomeAmbiguous && c.Reset() == nil {
			s.put(c)
		} else {
			s.discard(c, false)
		}
		return "", se
	}

	if err := c.conn.SetDeadline(s.deadline(ctx, time.Now())); err != nil {
		return fail(mail.StageConnect, err)
	}
	// RFC 5321 §4.1.2: both paths go in angle brackets.
	if err := c.Mail("<" + s.from + ">"); err != nil {
		return fail(mail.StageSender, err)
	}
	s.senderRefused.Store(false)
	if err := c.Rcpt("<" + m.To + ">"); err != nil {
		return fail(mail.StageRecipient, err)
	}
	// Last chance to stay out: once the data goes, the provider may have
	// it. The data's deadline counts from before the lease check and is
	// never extended after it: SMTP_TIMEOUT < LOCK_TTL then guarantees
	// that a worker frozen after the check cannot start writing the data
	// once its lease has run out and the reconciler may act.
	before := time.Now()
	if err := handOver(); err != nil {
		if rerr := c.Reset(); rerr != nil {
			s.discard(c, false)
		} else {
			s.put(c)
		}
		return "", &mail.SendError{Outcome: mail.OutcomeAborted, Stage: mail.StageData, Err: err}
	}
	handedOver = true
	if err := c.conn.SetDeadline(s.deadline(ctx, before)); err != nil {
		return fail(mail.StageData, err)
	}
	w, err := c.Data()
	if err != nil {
		return fail(mail.StageData, err)
	}
	if _, err := w.Write(raw); err != nil {
		// The terminating dot never went out: the server must discard it.
		return fail(mail.StageData, fmt.Errorf("write message data: %w", err))
	}
	if err := w.Close(); err != nil {
		var perr *textproto.Error
		if errors.As(err, &perr) {
			return fail(mail.StageData, err) // a definite refusal, classified by its code
		}
		// The whole message went out and no answer came back.
		se := &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Err: fmt.Errorf("no reply after the message data: %w", err), HandedOver: true}
		s.discard(c, false)
		return "", se
	}
	id := m.MessageID
	if dc, ok := w.(*gosmtp.DataCloser); ok {
		if q := queuedID(dc.ServerResponse()); q != "" {
			id = q
		}
	}
	s.deliveredOne()
	s.put(c)
	return id, nil
}

// queuedID extracts "ABC123" from a reply like "2.0.0 Ok: queued as ABC123".
func queuedID(reply string) string {
	i := strings.Index(strings.ToLower(reply), "queued as ")
	if i < 0 {
		return ""
	}
	f := strings.Fields(reply[i+len("queued as "):])
	if len(f) == 0 {
		return ""
	}
	return strings.Trim(f[0], "<>")
}

// put keeps c for the next send, for IdleTimeout at most, or closes it
// when MaxIdle are kept already.
func (s *Provider) put(c *smtpConn) {
	s.mu.Lock()
	if s.closed || len(s.idle) >= s.cfg.MaxIdle {
		s.mu.Unlock()
		s.discard(c, true)
		return
	}
	s.idle = append(s.idle, c)
	c.kept++
	kept := c.kept
	c.expiry = time.AfterFunc(s.cfg.IdleTimeout, func() { s.expire(c, kept) })
	s.wakeLocked()
	s.mu.Unlock()
}

// take returns the kept connection used last, or nil: under a light
// load the others go unused and expire.
func (s *Provider) take() *smtpConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takeLocked()
}

// takeLocked is take with s.mu held.
func (s *Provider) takeLocked() *smtpConn {
	n := len(s.idle)
	if n == 0 {
		return nil
	}
	c := s.idle[n-1]
	s.idle[n-1] = nil
	s.idle = s.idle[:n-1]
	c.expiry.Stop() // if it fired already, expire finds c gone and leaves it
	return c
}

// expire closes c if it is still kept since its kept'th time, idle for
// IdleTimeout.
func (s *Provider) expire(c *smtpConn, kept int) {
	s.mu.Lock()
	i := slices.Index(s.idle, c)
	if i >= 0 && c.kept != kept {
		i = -1 // taken and kept again since: a later expiry is its own
	}
	if i >= 0 {
		s.idle = slices.Delete(s.idle, i, i+1)
	}
	s.mu.Unlock()
	if i >= 0 {
		s.discard(c, true)
	}
}

// quit ends c's session politely, within a second.
func (s *Provider) quit(c *smtpConn) {
	_ = c.conn.SetDeadline(time.Now().Add(time.Second))
	_ = c.Quit()
	_ = c.Close()
}

func (s *Provider) dial(ctx context.Context) (*smtpConn, error) {
	addr := net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port))
	connectErr := func(err error) error { return smtpError(mail.StageConnect, err, "") }
	d := net.Dialer{Timeout: s.cfg.Timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, connectErr(fmt.Errorf("connect to %s: %w", addr, err))
	}
	if err := conn.SetDeadline(s.deadline(ctx, time.Now())); err != nil {
		conn.Close()
		return nil, connectErr(err)
	}
	tlsConfig := &tls.Config{ServerName: s.cfg.Host, MinVersion: tls.VersionTLS12, RootCAs: s.roots}
	if s.cfg.TLS == TLSImplicit {
		tc := tls.Client(conn, tlsConfig)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, connectErr(fmt.Errorf("tls handshake with %s: %w", addr, err))
		}
		conn = tc
	}
	c, err := gosmtp.NewClient(conn, s.cfg.Host)
	if err != nil {
		conn.Close()
		return nil, connectErr(fmt.Errorf("smtp greeting from %s: %w", addr, err))
	}
	if err := c.Hello(s.cfg.HeloName); err != nil {
		c.Close()
		return nil, connectErr(fmt.Errorf("ehlo: %w", err))
	}
	if s.cfg.TLS == TLSStartTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			c.Close()
			return nil, connectErr(fmt.Errorf("%s does not offer STARTTLS and SMTP_TLS=starttls requires it", addr))
		}
		if err := c.StartTLS(tlsConfig); err != nil {
			c.Close()
			return nil, connectErr(fmt.Errorf("starttls: %w", err))
		}
	}
	if s.cfg.Username != "" {
		if err := c.Auth(gosmtp.PlainAuth("", s.cfg.Username, s.cfg.Password, s.cfg.Host, s.cfg.TLS == TLSNone)); err != nil {
			c.Close()
			return nil, smtpError(mail.StageAuth, fmt.Errorf("smtp auth: %w", err), "")
		}
	}
	return &smtpConn{Client: c, conn: conn}, nil
}

// compose builds the MIME message (mailmime.Compose) with, when
// configured, the idempotency key header (only for a relay that
// deduplicates by it: elsewhere it would tell every server on the way the
// order and the customer's address for nothing), the metadata header and
// the DKIM signature.
func (s *Provider) compose(m mail.Message) ([]byte, error) {
	o := mailmime.Options{From: s.sender, DKIM: s.dkim}
	if h := s.cfg.IdempotencyHeader; h != "" {
		key := m.IdempotencyKey
		if strings.EqualFold(h, "Resend-Idempotency-Key") {
			key = mail.ProviderKey(key) // what Resend's HTTP API gets too: at most 256 characters, no address
		}
		o.Headers = append(o.Headers, mailmime.Header{Name: h, Value: key})
	}
	if s.cfg.MetadataHeader != "" {
		o.Headers = append(o.Headers, mailmime.Header{Name: s.cfg.MetadataHeader, Value: mail.KeyHash(m.IdempotencyKey)})
	}
	return mailmime.Compose(m, o)
}
