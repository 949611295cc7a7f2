package smtpsink

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"

	"github.com/emersion/go-smtp"
)

var (
	errShuttingDown = &smtp.SMTPError{
		Code:         421,
		EnhancedCode: smtp.EnhancedCode{4, 3, 2},
		Message:      "Service shutting down",
	}
	// errDropped is returned from Data after the connection was closed on
	// purpose; go-smtp's attempt to write it to the closed connection fails
	// silently, so the client sees no reply at all.
	errDropped = errors.New("smtpsink: connection dropped after DATA")
)

// session is one SMTP connection's transaction state. go-smtp calls Mail,
// Rcpt, Reset and (for DATA) Data from the connection's goroutine, but Data
// runs in a goroutine of its own for BDAT and Logout comes from Server.Close,
// hence the mutex.
type session struct {
	srv  *Server
	conn net.Conn

	mu   sync.Mutex
	from string
	to   []string
}

// newSession is the go-smtp Backend. go-smtp calls it at the first HELO/EHLO
// of a connection, not when the connection is accepted.
func (s *Server) newSession(c *smtp.Conn) (smtp.Session, error) {
	return &session{srv: s, conn: c.Conn()}, nil
}

// Reset is called by go-smtp on RSET, on a repeated EHLO and after every DATA
// (whatever its outcome), so each transaction starts with an empty envelope.
func (ss *session) Reset() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.from, ss.to = "", nil
}

// Logout is called by go-smtp when the connection closes.
func (ss *session) Logout() error { return nil }

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	if hook := ss.srv.cfg.OnMail; hook != nil {
		if err := hook(from); err != nil {
			return reply(err)
		}
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.from, ss.to = from, nil
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if hook := ss.srv.cfg.OnRcpt; hook != nil {
		if err := hook(to); err != nil {
			return reply(err)
		}
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.to = append(ss.to, to)
	return nil
}

// Data reads the message and decides the reply. go-smtp replies with what Data
// returns: nil becomes its fixed "250 2.0.0 OK: queued", and an *smtp.SMTPError
// is written as it is, whatever its code. So the sink returns a 250 SMTPError
// to put the queue id into the reply.
func (ss *session) Data(r io.Reader) error {
	srv := ss.srv
	if !srv.enterData() {
		return errShuttingDown
	}
	defer srv.data.Done()

	data, err := io.ReadAll(r)
	if err != nil {
		var smtpErr *smtp.SMTPError
		if errors.As(err, &smtpErr) {
			return smtpErr // e.g. smtp.ErrDataTooLarge, go-smtp wants it unwrapped
		}
		return fmt.Errorf("read message: %w", err)
	}

	ss.mu.Lock()
	m := newMessage(ss.from, slices.Clone(ss.to), data)
	ss.mu.Unlock()

	if hook := srv.cfg.DataDelay; hook != nil {
		if d := hook(m); d > 0 && !srv.stall(d) {
			return errShuttingDown
		}
	}
	if hook := srv.cfg.DropAfterData; hook != nil && hook(m) {
		m.Dropped = true
		srv.record(*m)
		ss.conn.Close()
		return errDropped
	}
	if hook := srv.cfg.OnData; hook != nil {
		if err := hook(m); err != nil {
			return reply(err)
		}
	}
	srv.record(*m)
	return &smtp.SMTPError{
		Code:         250,
		EnhancedCode: smtp.EnhancedCode{2, 0, 0},
		Message:      "Ok: queued as " + m.QueueID,
	}
}

// reply turns a hook's error into the *smtp.SMTPError go-smtp should send.
// go-smtp recognises an SMTPError only by type assertion, not errors.As, so a
// wrapped one must be unwrapped here; any other error becomes a 451.
func reply(err error) error {
	var smtpErr *smtp.SMTPError
	if errors.As(err, &smtpErr) {
		return smtpErr
	}
	return &smtp.SMTPError{
		Code:         451,
		EnhancedCode: smtp.EnhancedCode{4, 0, 0},
		Message:      err.Error(),
	}
}
