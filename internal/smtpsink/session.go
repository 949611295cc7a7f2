package smtpsink

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

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
	conn *conn

	mu     sync.Mutex
	mailed bool // MAIL accepted; from is "" for the null sender
	from   string
	to     []string
	body   smtp.BodyType // MAIL's BODY=, "" when not given
	utf8   bool          // MAIL's SMTPUTF8
}

// stage is how far a session has got. go-smtp calls Mail and Rcpt only for
// commands it accepts, and Reset whenever it ends a transaction, so the
// session's view of it is go-smtp's.
type stage int

const (
	stageGreet stage = iota // no HELO/EHLO yet, hence no session
	stageReady              // no transaction
	stageMail               // MAIL accepted, no RCPT yet
	stageRcpt               // at least one RCPT accepted
)

// newSession is the go-smtp Backend. go-smtp calls it at the first HELO/EHLO
// of a connection, not when the connection is accepted.
func (s *Server) newSession(c *smtp.Conn) (smtp.Session, error) {
	tc, ok := c.Conn().(*conn)
	if !ok { // go-smtp replaced the connection: only STARTTLS does, and the sink offers none
		return nil, fmt.Errorf("smtpsink: unexpected connection type %T", c.Conn())
	}
	ss := &session{srv: s, conn: tc}
	tc.sess = ss
	return ss, nil
}

func (ss *session) stage() stage {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	switch {
	case len(ss.to) > 0:
		return stageRcpt
	case ss.mailed:
		return stageMail
	}
	return stageReady
}

// Reset is called by go-smtp on RSET, on a repeated EHLO and after every DATA
// (whatever its outcome), so each transaction starts with an empty envelope.
func (ss *session) Reset() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.mailed, ss.from, ss.to, ss.body, ss.utf8 = false, "", nil, "", false
}

// Logout is called by go-smtp when the connection closes.
func (ss *session) Logout() error { return nil }

func (ss *session) Mail(from string, opts *smtp.MailOptions) error {
	if !opts.UTF8 && !isASCII(from) {
		return errUnicodeAddress
	}
	if refusal := ss.srv.admitMail(time.Now()); refusal != nil {
		return ss.reply(refusal)
	}
	if hook := ss.srv.cfg.OnMail; hook != nil {
		if err := hook(from); err != nil {
			return ss.reply(err)
		}
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.mailed, ss.from, ss.to, ss.body, ss.utf8 = true, from, nil, opts.Body, opts.UTF8
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.mu.Lock()
	smtputf8 := ss.utf8
	ss.mu.Unlock()
	if !smtputf8 && !isASCII(to) {
		return errUnicodeAddress
	}
	if hook := ss.srv.cfg.OnRcpt; hook != nil {
		if err := hook(to); err != nil {
			return ss.reply(err)
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
	from, to := ss.from, slices.Clone(ss.to)
	eightBit, smtputf8 := ss.body == smtp.Body8BitMIME, ss.utf8
	ss.mu.Unlock()
	// A message a real server would refuse reaches no hook.
	if refusal := checkText(data, eightBit, smtputf8); refusal != nil {
		return refusal
	}
	m := newMessage(from, to, data)

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
			return ss.reply(err)
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
// wrapped one must be unwrapped here; any other error becomes a 451. After a
// 421 the connection ends, as RFC 5321 §3.8 has a server do: go-smtp sends
// the reply and would read on, but its next read ends the input.
func (ss *session) reply(err error) error {
	var smtpErr *smtp.SMTPError
	if !errors.As(err, &smtpErr) {
		smtpErr = &smtp.SMTPError{
			Code:         451,
			EnhancedCode: smtp.EnhancedCode{4, 0, 0},
			Message:      err.Error(),
		}
	}
	if smtpErr.Code == 421 {
		ss.conn.hangUp.Store(true)
	}
	return smtpErr
}
