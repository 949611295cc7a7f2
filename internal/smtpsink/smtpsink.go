// Package smtpsink is a real SMTP server that records the messages it accepts
// and can inject the failures of a mail provider: rejected senders and
// recipients, rejected messages, slow replies and connections that break after
// the message was sent but before it was acknowledged.
//
// It is meant for tests and for small test binaries (fault injection,
// benchmarks), so it speaks real SMTP over real TCP connections and does not
// depend on package testing. Its HTTP handler imitates the search APIs of
// Mailpit and MailHog, so that code asking "did the provider accept the message
// with this Message-ID?" works against the sink as it does against them.
//
// The sink is at least as strict as the real servers a client meets (Mailpit,
// Postfix), so that a client's mistake fails a unit test rather than a
// delivery. On top of what go-smtp checks, it refuses:
//
//   - a command line longer than 512 octets, CRLF included (RFC 5321
//     §4.5.3.1.4): 500 5.5.2, and it reads on;
//   - a command line ending in a bare LF or holding a bare CR: 500 5.5.2,
//     and it hangs up, as Postfix does since the SMTP smuggling fixes; one
//     that is not UTF-8: 500 5.5.2;
//   - commands out of order: MAIL before HELO/EHLO or within a transaction,
//     RCPT before MAIL, DATA or BDAT before RCPT: 503 5.5.1;
//   - MAIL FROM and RCPT TO not spelled as RFC 5321 §4.1.2 says: the path
//     in angle brackets ("<>", the null sender, only at MAIL), no space
//     around the colon, a well-formed mailbox, parameters after single
//     spaces: 501 5.5.4 "Syntax error in parameters or arguments (invalid
//     FROM parameter)", or "TO", as Mailpit replies;
//   - a non-ASCII address in a transaction without SMTPUTF8 at MAIL:
//     553 5.6.7;
//   - after the final dot, without recording it, a message whose text has a
//     bare LF or bare CR (550 5.5.2), a line longer than 1000 octets, CRLF
//     included (RFC 5321 §4.5.3.1.6; 550 5.5.2), 8-bit octets without
//     BODY=8BITMIME at MAIL, or 8-bit octets in the header without SMTPUTF8
//     (550 5.6.0). It offers 8BITMIME and SMTPUTF8.
//
// Like a relay, it can limit the rate of messages (Config.RateLimit): past
// it, MAIL FROM is refused with a rate reply, 421 4.7.0 by default.
//
// go-smtp itself refuses unknown commands and MAIL or RCPT parameters, a BDAT
// chunk without a size, a message over 10 MiB and more than 50 recipients.
// After replying 421, from a hook or otherwise, the sink closes the
// connection (RFC 5321 §3.8).
package smtpsink

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"maps"
	"net"
	"net/mail"
	"net/textproto"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
)

const (
	defaultAddr     = "127.0.0.1:0"
	maxMessageBytes = 10 << 20
	maxRecipients   = 50
)

// Message is one message the sink accepted (it replied 250 to the final dot),
// or - for DropAfterData - one it read completely and then hung up on.
type Message struct {
	From       string      // MAIL FROM address
	To         []string    // RCPT TO addresses
	Data       []byte      // the raw message as received (headers + body, CRLF)
	Header     mail.Header // parsed headers (net/mail); those before any malformed line
	MessageID  string      // Message-ID header value with the angle brackets removed, "" if none
	QueueID    string      // the id the sink put in its 250 reply: "250 2.0.0 Ok: queued as <QueueID>"
	Dropped    bool        // true when DropAfterData hung up instead of replying
	ReceivedAt time.Time   // when the final dot was read
}

// clone returns a copy of m that shares no memory with it.
func (m Message) clone() Message {
	m.To = slices.Clone(m.To)
	m.Data = slices.Clone(m.Data)
	h := make(mail.Header, len(m.Header))
	for k, v := range m.Header {
		h[k] = slices.Clone(v)
	}
	m.Header = h
	return m
}

// Config says where to listen and which faults to inject. All hooks are optional
// and may be called concurrently from several connections. A hook returning a
// non-nil error makes the sink reply with that error: return *smtp.SMTPError
// (from go-smtp, possibly wrapped) to choose the code, e.g. 451 (temporary) or
// 550 (permanent); any other error becomes a 451 whose text is the error's.
// An *smtp.SMTPError with code 421 is sent, and then the sink closes the
// connection, as a server does with 421; that is how to end a session in the
// middle.
//
// Hooks see only what the sink's protocol checks (see the package comment)
// let through: a command or message they refuse reaches no hook.
//
// After the message is read, the sink applies, in this order: DataDelay,
// DropAfterData, OnData; then it records the message and replies 250.
// A hook that blocks holds its connection and Server.Close until it returns.
type Config struct {
	Addr          string                         // e.g. "127.0.0.1:0" (default when empty)
	OnMail        func(from string) error        // at MAIL FROM
	OnRcpt        func(to string) error          // at RCPT TO
	OnData        func(m *Message) error         // after the whole message is read, before replying; a non-nil error rejects it (not recorded)
	DataDelay     func(m *Message) time.Duration // stall this long after reading the message, before replying (and before recording)
	DropAfterData func(m *Message) bool          // true: record the message with Dropped=true, then close the TCP connection without any reply
	RateLimit     RateLimit                      // a relay's limit on messages; none when zero
}

// RateLimit is a relay's limit on the messages it takes, shared by every
// connection: at most Messages MAIL commands in any window of Per (a
// sliding window), past which MAIL is refused with Reply. The stage is
// MAIL FROM because that is where a relay counts a message (Postfix's
// smtpd_client_message_rate_limit answers there): the refusal comes
// before any recipient or data, so nothing of the message was taken,
// and it reaches no OnMail hook. Refused commands do not count against
// the window.
type RateLimit struct {
	Messages int           // MAIL commands admitted per window; 0: no limit
	Per      time.Duration // the window; a second when 0
	// Reply is the refusal: nil for 421 4.7.0 "Rate limit exceeded, try
	// again later", after which the sink closes the connection, as after
	// any 421. Relays also answer 451 4.7.1 (the session goes on) or, as
	// SES's SMTP interface does, 454 "Throttling failure: Maximum sending
	// rate exceeded.".
	Reply *smtp.SMTPError
}

// errRateLimited is RateLimit's default reply.
var errRateLimited = &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 7, 0}, Message: "Rate limit exceeded, try again later"}

// admitMail counts a MAIL command at now against cfg.RateLimit and
// returns the refusal when it is past it, nil when admitted.
func (s *Server) admitMail(now time.Time) *smtp.SMTPError {
	rl := s.cfg.RateLimit
	if rl.Messages <= 0 {
		return nil
	}
	per := rl.Per
	if per <= 0 {
		per = time.Second
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	for i < len(s.mailTimes) && !now.Before(s.mailTimes[i].Add(per)) {
		i++
	}
	s.mailTimes = s.mailTimes[i:]
	if len(s.mailTimes) < rl.Messages {
		s.mailTimes = append(s.mailTimes, now)
		return nil
	}
	s.rateLimited++
	if rl.Reply != nil {
		return rl.Reply
	}
	return errRateLimited
}

// RateLimited counts the MAIL commands refused for the rate limit.
func (s *Server) RateLimited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rateLimited
}

// Server is a running sink. Its methods are safe for concurrent use.
type Server struct {
	cfg  Config
	smtp *smtp.Server
	ln   *listener

	serveDone chan struct{} // closed when the Serve goroutine returns
	serveErr  error         // set before serveDone is closed
	done      chan struct{} // closed by Close; ends DataDelay stalls
	data      sync.WaitGroup

	mu          sync.Mutex
	closed      bool
	accepted    int
	mailTimes   []time.Time // MAIL commands admitted within RateLimit's window, oldest first
	rateLimited int
	conns       map[*conn]struct{}
	msgs        []Message
	changed     chan struct{} // closed and replaced whenever msgs grows
}

// Start listens on cfg.Addr and serves SMTP in a goroutine that the returned
// Server owns until Close.
func Start(cfg Config) (*Server, error) {
	addr := cfg.Addr
	if addr == "" {
		addr = defaultAddr
	}
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("smtpsink: listen on %s: %w", addr, err)
	}

	s := &Server{
		cfg:       cfg,
		serveDone: make(chan struct{}),
		done:      make(chan struct{}),
		conns:     make(map[*conn]struct{}),
		changed:   make(chan struct{}),
	}
	s.ln = &listener{Listener: tcp, srv: s}

	srv := smtp.NewServer(smtp.BackendFunc(s.newSession))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true
	srv.EnableSMTPUTF8 = true
	srv.MaxMessageBytes = maxMessageBytes
	srv.MaxRecipients = maxRecipients
	// conn and checkText limit line lengths as RFC 5321 does; go-smtp's
	// limit (2000 octets for every line) would cut a message short instead
	// of refusing it after the final dot.
	srv.MaxLineLength = 0
	// go-smtp logs only what it cannot report to a client: accept errors,
	// connections that fail other than by EOF or close, and panics in hooks.
	srv.ErrorLog = log.New(os.Stderr, "smtpsink: ", log.LstdFlags)
	s.smtp = srv

	go func() {
		defer close(s.serveDone)
		s.serveErr = srv.Serve(s.ln)
	}()
	return s, nil
}

// Addr returns the address the sink listens on, e.g. "127.0.0.1:2525".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Host returns the IP address the sink listens on.
func (s *Server) Host() string { return s.tcpAddr().IP.String() }

// Port returns the TCP port the sink listens on.
func (s *Server) Port() int { return s.tcpAddr().Port }

func (s *Server) tcpAddr() *net.TCPAddr {
	a, _ := s.ln.Addr().(*net.TCPAddr) // always a TCP listener, see Start
	return a
}

// Messages returns a copy of the recorded messages, in arrival order.
func (s *Server) Messages() []Message {
	return s.filter(func(Message) bool { return true })
}

// Count returns the number of recorded messages.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

// ByMessageID returns copies of the recorded messages whose Message-ID is id.
// Angle brackets around id are ignored.
func (s *Server) ByMessageID(id string) []Message {
	id = trimBrackets(id)
	return s.filter(func(m Message) bool { return m.MessageID == id })
}

// ByRecipient returns copies of the recorded messages that had addr among
// their RCPT TO addresses, compared case-insensitively.
func (s *Server) ByRecipient(addr string) []Message {
	return s.filter(func(m Message) bool {
		return slices.ContainsFunc(m.To, func(to string) bool { return strings.EqualFold(to, addr) })
	})
}

func (s *Server) filter(keep func(Message) bool) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Message{}
	for _, m := range s.msgs {
		if keep(m) {
			out = append(out, m.clone())
		}
	}
	return out
}

// WaitForCount returns nil once at least n messages are recorded, or an error
// wrapping ctx.Err() if ctx ends first.
func (s *Server) WaitForCount(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		have, changed := len(s.msgs), s.changed
		s.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("smtpsink: wait for %d messages, have %d: %w", n, have, ctx.Err())
		}
	}
}

// Connections returns the number of TCP connections accepted so far.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// Close stops listening, closes every open connection, ends DataDelay stalls
// and waits until all of the sink's goroutines have returned. No message is
// recorded after Close returns. Calling Close again does nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	open := slices.Collect(maps.Keys(s.conns))
	s.mu.Unlock()

	lnErr := s.ln.Close()
	for _, c := range open {
		c.Close()
	}
	// Serve returns once Accept fails; only then has it started every
	// connection goroutine, so the Shutdown below waits for all of them.
	<-s.serveDone
	shutErr := s.smtp.Shutdown(context.Background())
	// With BDAT, go-smtp calls Session.Data in a goroutine it does not wait for.
	s.data.Wait()

	var errs []error
	if lnErr != nil {
		errs = append(errs, fmt.Errorf("close listener: %w", lnErr))
	}
	if s.serveErr != nil && !errors.Is(s.serveErr, net.ErrClosed) {
		errs = append(errs, fmt.Errorf("serve: %w", s.serveErr))
	}
	if shutErr != nil {
		errs = append(errs, fmt.Errorf("shut down: %w", shutErr))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("smtpsink: close: %w", err)
	}
	return nil
}

// record stores m and wakes WaitForCount.
func (s *Server) record(m Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, m)
	close(s.changed)
	s.changed = make(chan struct{})
}

// enterData registers a running Session.Data so that Close waits for it.
// It reports false once Close has begun.
func (s *Server) enterData() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.data.Add(1)
	return true
}

// stall waits for d, or until Close. It reports whether d passed.
func (s *Server) stall(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

// newMessage builds the Message for raw data received from the envelope.
func newMessage(from string, to []string, data []byte) *Message {
	m := &Message{
		From:       from,
		To:         to,
		Data:       data,
		Header:     mail.Header{},
		QueueID:    newQueueID(),
		ReceivedAt: time.Now(),
	}
	// A header that is cut short or malformed still yields the fields read
	// before the problem: the sink records what it got, as a mailbox would.
	h, _ := textproto.NewReader(bufio.NewReader(bytes.NewReader(data))).ReadMIMEHeader()
	if h != nil {
		m.Header = mail.Header(h)
	}
	m.MessageID = trimBrackets(m.Header.Get("Message-Id"))
	return m
}

// newQueueID returns 16 random hex digits.
func newQueueID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails, see crypto/rand.Read
	return strings.ToUpper(hex.EncodeToString(b[:]))
}

func trimBrackets(id string) string {
	id = strings.TrimSpace(id)
	id = strings.TrimPrefix(id, "<")
	return strings.TrimSuffix(id, ">")
}
