package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/wneessen/go-mail"
	"github.com/wneessen/go-mail/smtp"
)

// TLS policies for the SMTP connection.
const (
	TLSNone     = "none"     // plain text: loopback and development sinks only
	TLSStartTLS = "starttls" // STARTTLS required; refuse a server without it
	TLSImplicit = "tls"      // TLS from the first byte (usually port 465)
)

// devHosts may be reached without TLS: the compose stack's sinks.
var devHosts = map[string]bool{"localhost": true, "mailhog": true, "mailpit": true}

// SMTPConfig configures the SMTP provider.
type SMTPConfig struct {
	Host              string
	Port              int
	Username          string
	Password          string
	TLS               string // TLSNone, TLSStartTLS or TLSImplicit
	From              string // envelope and header sender, a bare address
	IdempotencyHeader string // header that carries the idempotency key
	Timeout           time.Duration
	MaxIdle           int // connections kept open for reuse
}

// Validate checks the configuration, including the TLS policy.
func (c SMTPConfig) Validate() error {
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
	if _, err := NormalizeAddress(c.From); err != nil {
		errs = append(errs, fmt.Errorf("MAIL_FROM: %w", err))
	}
	if textproto.CanonicalMIMEHeaderKey(c.IdempotencyHeader) == "" || strings.ContainsAny(c.IdempotencyHeader, " :\r\n") {
		errs = append(errs, fmt.Errorf("idempotency header %q is not a header name", c.IdempotencyHeader))
	}
	return errors.Join(errs...)
}

func plainTextAllowed(host string) bool {
	if devHosts[strings.ToLower(host)] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SMTP sends through an SMTP server, keeping connections open between
// messages so that a busy worker does not pay a handshake per e-mail.
type SMTP struct {
	cfg    SMTPConfig
	domain string // of From, for Message-IDs
	idle   chan *smtpConn
}

// smtpConn is a client and the connection under it, whose deadline the
// provider sets itself, in absolute time.
type smtpConn struct {
	*smtp.Client
	conn net.Conn
}

// NewSMTP returns an SMTP provider; cfg must be valid.
func NewSMTP(cfg SMTPConfig) (*SMTP, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxIdle <= 0 {
		cfg.MaxIdle = 1
	}
	from, _ := NormalizeAddress(cfg.From)
	return &SMTP{cfg: cfg, domain: from[strings.LastIndexByte(from, '@')+1:], idle: make(chan *smtpConn, cfg.MaxIdle)}, nil
}

// Close closes the idle connections.
func (s *SMTP) Close() {
	for {
		select {
		case c := <-s.idle:
			_ = c.Quit()
			_ = c.Close()
		default:
			return
		}
	}
}

// Send implements Provider.
func (s *SMTP) Send(ctx context.Context, m Message, handOver func() error) (string, error) {
	raw, err := s.compose(m)
	if err != nil {
		return "", &SendError{Outcome: OutcomePermanent, Err: fmt.Errorf("compose message: %w", err)}
	}
	// A kept connection may have been closed by the server while idle,
	// with or without a 421: if it fails before the data, try once more
	// on a fresh one.
	for try := 0; ; try++ {
		var c *smtpConn
		reused := false
		if try == 0 {
			c, reused, err = s.conn(ctx)
		} else {
			c, err = s.dial(ctx) // not another idle one: they may all be dead
		}
		if err != nil {
			return "", &SendError{Outcome: OutcomeTemporary, Err: err}
		}
		id, err := s.transact(ctx, c, m, raw, handOver)
		var se *SendError
		if reused && try == 0 && errors.As(err, &se) && se.Outcome == OutcomeTemporary && (se.Code == 0 || se.Code == 421) && !se.handedOver {
			continue
		}
		return id, err
	}
}

// deadline is when an exchange begun now must be over: SMTP_TIMEOUT from
// now, or the caller's deadline if that is sooner.
func (s *SMTP) deadline(ctx context.Context, now time.Time) time.Time {
	d := now.Add(s.cfg.Timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}

// transact runs one SMTP transaction on c and puts c back when it is
// still usable.
func (s *SMTP) transact(ctx context.Context, c *smtpConn, m Message, raw []byte, handOver func() error) (string, error) {
	handedOver := false
	fail := func(outcome Outcome, err error) (string, error) {
		code := 0
		var perr *textproto.Error
		if errors.As(err, &perr) {
			code = perr.Code
		}
		switch {
		case outcome == OutcomeAmbiguous:
		case code >= 500:
			outcome = OutcomePermanent
		default:
			outcome = OutcomeTemporary
		}
		// A refusal ends the transaction, not the connection; 421 means
		// the server is closing it, and anything without a code left it in
		// an unknown state.
		if code != 0 && code != 421 && outcome != OutcomeAmbiguous && c.Reset() == nil {
			s.put(c)
		} else {
			_ = c.Close()
		}
		return "", &SendError{Outcome: outcome, Code: code, Err: err, handedOver: handedOver}
	}

	if err := c.conn.SetDeadline(s.deadline(ctx, time.Now())); err != nil {
		return fail(OutcomeTemporary, err)
	}
	if err := c.Mail(s.cfg.From); err != nil {
		return fail(OutcomeTemporary, err)
	}
	if err := c.Rcpt(m.To); err != nil {
		return fail(OutcomeTemporary, err)
	}
	// Last chance to stay out: once the data goes, the provider may have
	// it. The data's deadline counts from before the lease check and is
	// never extended after it: SMTP_TIMEOUT < LOCK_TTL then guarantees
	// that a worker frozen after the check cannot start writing the data
	// once its lease has run out and the reconciler may act.
	before := time.Now()
	if err := handOver(); err != nil {
		if rerr := c.Reset(); rerr != nil {
			_ = c.Close()
		} else {
			s.put(c)
		}
		return "", &SendError{Outcome: OutcomeAborted, Err: err}
	}
	handedOver = true
	if err := c.conn.SetDeadline(s.deadline(ctx, before)); err != nil {
		return fail(OutcomeTemporary, err)
	}
	w, err := c.Data()
	if err != nil {
		return fail(OutcomeTemporary, err)
	}
	if _, err := w.Write(raw); err != nil {
		// The terminating dot never went out: the server must discard it.
		return fail(OutcomeTemporary, fmt.Errorf("write message data: %w", err))
	}
	if err := w.Close(); err != nil {
		var perr *textproto.Error
		if errors.As(err, &perr) {
			return fail(OutcomeTemporary, err) // a definite refusal, classified by its code
		}
		// The whole message went out and no answer came back.
		return fail(OutcomeAmbiguous, fmt.Errorf("no reply after the message data: %w", err))
	}
	id := m.MessageID
	if dc, ok := w.(*smtp.DataCloser); ok {
		if q := queuedID(dc.ServerResponse()); q != "" {
			id = q
		}
	}
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

func (s *SMTP) put(c *smtpConn) {
	select {
	case s.idle <- c:
	default:
		_ = c.Quit()
		_ = c.Close()
	}
}

// conn returns an idle connection or dials a new one.
func (s *SMTP) conn(ctx context.Context) (c *smtpConn, reused bool, err error) {
	select {
	case c := <-s.idle:
		return c, true, nil
	default:
	}
	c, err = s.dial(ctx)
	return c, false, err
}

func (s *SMTP) dial(ctx context.Context) (*smtpConn, error) {
	addr := net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port))
	d := net.Dialer{Timeout: s.cfg.Timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	if err := conn.SetDeadline(s.deadline(ctx, time.Now())); err != nil {
		conn.Close()
		return nil, err
	}
	tlsConfig := &tls.Config{ServerName: s.cfg.Host, MinVersion: tls.VersionTLS12}
	if s.cfg.TLS == TLSImplicit {
		tc := tls.Client(conn, tlsConfig)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
		}
		conn = tc
	}
	c, err := smtp.NewClient(conn, s.cfg.Host)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("smtp greeting from %s: %w", addr, err)
	}
	if err := c.Hello(s.domain); err != nil {
		c.Close()
		return nil, fmt.Errorf("ehlo: %w", err)
	}
	if s.cfg.TLS == TLSStartTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			c.Close()
			return nil, fmt.Errorf("%s does not offer STARTTLS and SMTP_TLS=starttls requires it", addr)
		}
		if err := c.StartTLS(tlsConfig); err != nil {
			c.Close()
			return nil, fmt.Errorf("starttls: %w", err)
		}
	}
	if s.cfg.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", s.cfg.Username, s.cfg.Password, s.cfg.Host, s.cfg.TLS == TLSNone)); err != nil {
			c.Close()
			return nil, fmt.Errorf("smtp auth: %w", err)
		}
	}
	return &smtpConn{Client: c, conn: conn}, nil
}

// compose builds the MIME message: text and HTML alternatives, the
// deterministic Message-ID and the idempotency key header.
func (s *SMTP) compose(m Message) ([]byte, error) {
	msg := mail.NewMsg(mail.WithNoDefaultUserAgent())
	if err := msg.From(s.cfg.From); err != nil {
		return nil, err
	}
	if err := msg.To(m.To); err != nil {
		return nil, err
	}
	msg.Subject(m.Subject)
	msg.SetMessageIDWithValue(m.MessageID)
	msg.SetGenHeader(mail.Header(s.cfg.IdempotencyHeader), m.IdempotencyKey)
	msg.SetDate()
	msg.SetBodyString(mail.TypeTextPlain, m.Text)
	if m.HTML != "" {
		msg.AddAlternativeString(mail.TypeTextHTML, m.HTML)
	}
	var buf bytes.Buffer
	if _, err := msg.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
