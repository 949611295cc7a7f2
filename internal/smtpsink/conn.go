package smtpsink

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/emersion/go-smtp"
)

// conn is an accepted connection as go-smtp sees it. It stands between the
// client and go-smtp and checks every command line before go-smtp reads it,
// because go-smtp forgives what real servers refuse (a MAIL FROM without
// angle brackets, for one) and hands the session only the parsed address.
// A line that breaks a rule (see the package comment) is answered here and
// never reaches go-smtp. conn forgets itself when closed.
//
// For that, go-smtp must never read ahead of the command it is handling, or
// the next command would reach it unchecked. So Read hands go-smtp at most
// one line at a time (its bufio.Reader reads again only once it has used up
// what it has), a BDAT chunk to its last byte, and the message text after
// DATA also a line at a time, so that go-smtp's read of the final dot
// stops there.
//
// go-smtp calls Read and Write only from the connection's goroutine (with
// BDAT, its other goroutine reads from a pipe), so the reading state needs no
// lock; hangUp is set from session hooks, which may run in that other
// goroutine.
type conn struct {
	net.Conn
	srv *Server
	in  *bufio.Reader // the client's bytes, read ahead of go-smtp

	sess      *session // nil until the first HELO/EHLO; set by newSession
	buf       [maxCommandLine]byte
	line      []byte // what go-smtp has still to read of the checked command line, in buf
	inData    bool   // between go-smtp's 354 and its reply to the message
	chunkLeft int64  // bytes of a BDAT chunk go-smtp has still to read
	skipLeft  int64  // bytes of a refused BDAT command's chunk to throw away

	hangUp atomic.Bool // end the connection instead of reading another command
}

var crlf = []byte("\r\n")

func (c *conn) Read(p []byte) (int, error) {
	switch {
	case len(c.line) > 0:
	case c.chunkLeft > 0:
		n, err := c.in.Read(p[:min(int64(len(p)), c.chunkLeft)])
		c.chunkLeft -= int64(n)
		return n, err
	case c.inData:
		return c.readTextLine(p)
	default:
		if err := c.nextCommand(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.line)
	c.line = c.line[n:]
	return n, nil
}

// Write notes what go-smtp will read next. go-smtp writes each reply line
// with one Write, and after its 354 it reads the message text to the final
// dot before it replies again.
func (c *conn) Write(p []byte) (int, error) {
	c.inData = bytes.HasPrefix(p, []byte("354 "))
	return c.Conn.Write(p)
}

func (c *conn) Close() error {
	c.srv.mu.Lock()
	delete(c.srv.conns, c)
	c.srv.mu.Unlock()
	return c.Conn.Close()
}

// readTextLine hands go-smtp the message text up to the end of the next line.
func (c *conn) readTextLine(p []byte) (int, error) {
	if c.in.Buffered() == 0 {
		if _, err := c.in.Peek(1); err != nil {
			return 0, err
		}
	}
	b, _ := c.in.Peek(min(len(p), c.in.Buffered())) // never fails: buffered
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	}
	n := copy(p, b)
	_, _ = c.in.Discard(n) // never fails: buffered
	return n, nil
}

// nextCommand reads command lines, answering those that break a rule
// itself, until it has one for go-smtp in c.line. It returns io.EOF, which
// go-smtp takes for the client hanging up, after a 421 or a reply that ends
// the connection.
func (c *conn) nextCommand() error {
	for {
		if c.hangUp.Load() {
			return io.EOF
		}
		if c.skipLeft > 0 {
			n, err := c.in.Discard(int(c.skipLeft))
			c.skipLeft -= int64(n)
			if err != nil {
				return err
			}
		}
		line, err := c.readCommandLine()
		if errors.Is(err, errLineTooLong) {
			c.reply(errLineTooLong)
			continue
		}
		if err != nil {
			return err
		}
		refusal, hangUp := c.check(line)
		if refusal == nil {
			c.line = line
			return nil
		}
		c.reply(refusal)
		if hangUp {
			c.hangUp.Store(true)
		}
	}
}

// readCommandLine returns the next command line, CRLF included, in c.buf, or
// errLineTooLong after skipping a line longer than maxCommandLine.
func (c *conn) readCommandLine() ([]byte, error) {
	line, err := c.in.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = c.in.ReadSlice('\n')
		}
		if err != nil {
			return nil, err
		}
		return nil, errLineTooLong
	case err != nil:
		return nil, err // a line cut short by the end of the input is no command
	case len(line) > maxCommandLine:
		return nil, errLineTooLong
	}
	return append(c.buf[:0], line...), nil
}

// check returns the reply refusing the command line, and whether the
// connection ends after it, or nil to hand the line to go-smtp. The order of
// the checks is Postfix's: the line, then the command's place in the
// session, then its arguments.
func (c *conn) check(line []byte) (refusal *smtp.SMTPError, hangUp bool) {
	text, ok := bytes.CutSuffix(line, crlf)
	switch {
	case !ok:
		return errBareLF, true
	case bytes.IndexByte(text, '\r') >= 0:
		return errBareCR, true
	case !utf8.Valid(text):
		return errBadUTF8, false
	}

	// go-smtp takes the verb to be what comes before the first space.
	verb, arg, _ := strings.Cut(string(text), " ")
	st := c.stage()
	switch strings.ToUpper(verb) {
	case "MAIL":
		switch {
		case st == stageGreet:
			return errNeedHello, false
		case st != stageReady:
			return errNestedMail, false
		case !validMailArg(arg):
			return errFromSyntax, false
		}
	case "RCPT":
		switch {
		case st < stageMail:
			return errNeedMail, false
		case !validRcptArg(arg):
			return errToSyntax, false
		}
	case "DATA":
		if st < stageRcpt {
			return errNeedRcpt, false
		}
	case "BDAT":
		size, ok := bdatChunkSize(arg)
		switch {
		case !ok:
			// go-smtp refuses the arguments with a 501, and no chunk follows.
		case st < stageRcpt:
			c.skipLeft = size
			return errNeedRcpt, false
		default:
			c.chunkLeft = size
		}
	}
	return nil, false
}

// stage returns how far the client has got, as go-smtp sees it.
func (c *conn) stage() stage {
	if c.sess == nil {
		return stageGreet
	}
	return c.sess.stage()
}

// reply writes r. Like go-smtp, it ignores a failed write: the next read
// reports the broken connection.
func (c *conn) reply(r *smtp.SMTPError) {
	ec := r.EnhancedCode
	_, _ = fmt.Fprintf(c.Conn, "%d %d.%d.%d %s\r\n", r.Code, ec[0], ec[1], ec[2], r.Message)
}

// bdatChunkSize returns the size of the chunk that follows a BDAT command
// with the arguments arg, parsed as go-smtp does, and false if go-smtp
// refuses them (and then reads no chunk).
func bdatChunkSize(arg string) (int64, bool) {
	args := strings.Fields(arg)
	if len(args) == 0 || len(args) > 2 || len(args) == 2 && !strings.EqualFold(args[1], "LAST") {
		return 0, false
	}
	size, err := strconv.ParseUint(args[0], 10, 32)
	return int64(size), err == nil
}
