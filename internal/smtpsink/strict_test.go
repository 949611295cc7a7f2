package smtpsink_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/sekali-dev/sekali/internal/smtpsink"
)

// rawClient speaks to the sink in raw lines, as no careful client would.
type rawClient struct {
	t    *testing.T
	conn net.Conn
	text *textproto.Reader
}

// dialRaw connects to srv and reads the greeting; it does not say EHLO.
func dialRaw(t *testing.T, srv *smtpsink.Server) *rawClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", srv.Addr(), waitLimit)
	if err != nil {
		t.Fatalf("dial sink: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(waitLimit)); err != nil {
		t.Fatalf("set deadline: %v", err)
	}
	c := &rawClient{t: t, conn: conn, text: textproto.NewReader(bufio.NewReader(conn))}
	c.wantReply(220, "")
	return c
}

// send writes s as it is: the caller spells out every line end.
func (c *rawClient) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, s); err != nil {
		c.t.Fatalf("send %.40q: %v", s, err)
	}
}

// wantReply reads a reply and fails the test unless it has code and begins
// with the enhanced status code enhanced ("" for none). It returns the text.
func (c *rawClient) wantReply(code int, enhanced string) string {
	c.t.Helper()
	got, text, err := c.text.ReadResponse(0)
	if err != nil {
		c.t.Fatalf("read reply: %v; want %d %s", err, code, enhanced)
	}
	if got != code || !strings.HasPrefix(text, enhanced) {
		c.t.Fatalf("reply %d %s; want %d %s", got, text, code, enhanced)
	}
	return text
}

// cmd sends line with CRLF and checks its reply as wantReply does.
func (c *rawClient) cmd(line string, code int, enhanced string) string {
	c.t.Helper()
	c.send(line + "\r\n")
	return c.wantReply(code, enhanced)
}

func (c *rawClient) ehlo() {
	c.t.Helper()
	c.cmd("EHLO client.sekali.test", 250, "")
}

// wantClosed fails the test unless the sink has closed the connection
// without another reply.
func (c *rawClient) wantClosed() {
	c.t.Helper()
	line, err := c.text.ReadLine()
	if err == nil {
		c.t.Fatalf("read %q; want the connection closed", line)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		c.t.Fatalf("read: %v; want the connection closed", err)
	}
}

// header is the header section of a well-formed message.
const header = "From: <" + sender + ">\r\nTo: <rcpt@sekali.test>\r\nSubject: strict\r\nMessage-ID: <strict@sekali.test>\r\n\r\n"

// line returns a text line of n octets, CRLF included.
func line(n int) string { return strings.Repeat("x", n-2) + "\r\n" }

func TestPathsNeedAngleBrackets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mail, rcpt string // one of them, the other empty
		wantCode   int
	}{
		{mail: "MAIL FROM:shop@example.test", wantCode: 501},
		{mail: "MAIL FROM:<shop@example.test", wantCode: 501},
		{mail: "MAIL FROM:shop@example.test>", wantCode: 501},
		{mail: "MAIL FROM: <shop@example.test>", wantCode: 501},
		{mail: "MAIL FROM :<shop@example.test>", wantCode: 501},
		{mail: "MAIL  FROM:<shop@example.test>", wantCode: 501},
		{mail: "MAIL FROM:Shop <shop@example.test>", wantCode: 501},
		{mail: "MAIL FROM:<Shop <shop@example.test>>", wantCode: 501},
		{mail: "MAIL FROM:<shop@>", wantCode: 501},
		{mail: "MAIL FROM:<@example.test>", wantCode: 501},
		{mail: "MAIL FROM:<shop..x@example.test>", wantCode: 501},
		{mail: "MAIL FROM:<shop@example..test>", wantCode: 501},
		{mail: "MAIL FROM:<shop@example.test>BODY=8BITMIME", wantCode: 501},
		{mail: "MAIL FROM:<shop@example.test>  BODY=8BITMIME", wantCode: 501},
		{mail: "MAIL FROM:", wantCode: 501},
		{mail: "MAIL FROM:<shop@example.test>", wantCode: 250},
		{mail: "mail from:<shop@example.test>", wantCode: 250},
		{mail: "MAIL FROM:<> BODY=8BITMIME", wantCode: 250},
		{mail: "MAIL FROM:<shop@example.test> BODY=8BITMIME SMTPUTF8", wantCode: 250},
		{mail: `MAIL FROM:<"shop keeper"@example.test>`, wantCode: 250},
		{mail: "MAIL FROM:<@relay.example.test:shop@example.test>", wantCode: 250},
		{mail: "MAIL FROM:<shop@[192.0.2.1]>", wantCode: 250},

		{rcpt: "RCPT TO:ana@example.com", wantCode: 501},
		{rcpt: "RCPT TO:<ana@example.com", wantCode: 501},
		{rcpt: "RCPT TO: <ana@example.com>", wantCode: 501},
		{rcpt: "RCPT TO:<>", wantCode: 501},
		{rcpt: "RCPT TO:Ana <ana@example.com>", wantCode: 501},
		{rcpt: "RCPT TO:<ana@example.com>", wantCode: 250},
		{rcpt: "RCPT TO:<Ana.Lima+news@mail.example.com>", wantCode: 250},
	}
	for _, tt := range tests {
		name := tt.mail + tt.rcpt
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var hookCalls atomic.Int32
			srv := start(t, smtpsink.Config{
				OnMail: func(string) error { hookCalls.Add(1); return nil },
				OnRcpt: func(string) error { hookCalls.Add(1); return nil },
			})
			c := dialRaw(t, srv)
			c.ehlo()
			enhanced, wantCalls := "2.", int32(1)
			if tt.wantCode == 501 {
				enhanced, wantCalls = "5.5.4", 0
			}
			if tt.mail != "" {
				text := c.cmd(tt.mail, tt.wantCode, enhanced)
				if tt.wantCode == 501 && !strings.Contains(text, "(invalid FROM parameter)") {
					t.Errorf("reply text %q, want Mailpit's about the FROM parameter", text)
				}
			} else {
				c.cmd("MAIL FROM:<"+sender+">", 250, "2.")
				wantCalls++
				text := c.cmd(tt.rcpt, tt.wantCode, enhanced)
				if tt.wantCode == 501 && !strings.Contains(text, "(invalid TO parameter)") {
					t.Errorf("reply text %q, want Mailpit's about the TO parameter", text)
				}
			}
			if n := hookCalls.Load(); n != wantCalls {
				t.Errorf("hooks called %d times, want %d: a refused command reaches no hook", n, wantCalls)
			}
		})
	}
}

// A pipelining client's commands are checked one by one, and a refused MAIL
// leaves no transaction behind.
func TestPipelinedCommandsAreEachChecked(t *testing.T) {
	t.Parallel()
	srv := start(t, smtpsink.Config{})
	c := dialRaw(t, srv)
	c.ehlo()

	c.send("MAIL FROM:shop@example.test\r\nRCPT TO:<ana@example.com>\r\nDATA\r\n")
	c.wantReply(501, "5.5.4")
	c.wantReply(503, "5.5.1")
	c.wantReply(503, "5.5.1")

	c.send("MAIL FROM:<shop@example.test>\r\nRCPT TO:ana@example.com\r\nRCPT TO:<bob@example.com>\r\nDATA\r\n")
	c.wantReply(250, "2.")
	c.wantReply(501, "5.5.4")
	c.wantReply(250, "2.")
	c.wantReply(354, "")
	c.send(header + "hi\r\n.\r\n")
	c.wantReply(250, "2.0.0")

	msgs := srv.Messages()
	if len(msgs) != 1 || len(msgs[0].To) != 1 || msgs[0].To[0] != "bob@example.com" {
		t.Fatalf("recorded %+v, want one message to bob@example.com", msgs)
	}
}

func TestCommandLineLength(t *testing.T) {
	t.Parallel()
	srv := start(t, smtpsink.Config{})
	c := dialRaw(t, srv)
	c.ehlo()

	noop := func(n int) string { return "NOOP " + strings.Repeat("x", n-len("NOOP \r\n")) } // n octets with CRLF
	c.cmd(noop(512), 250, "2.0.0")
	c.cmd(noop(513), 500, "5.5.2")
	c.cmd(noop(100_000), 500, "5.5.2") // longer than any buffer on the way
	c.cmd("MAIL FROM:<"+strings.Repeat("a", 600)+"@example.test>", 500, "5.5.2")
	// The sink reads on, as Mailpit and Postfix do.
	c.cmd("NOOP", 250, "2.0.0")
	c.cmd("MAIL FROM:<"+sender+">", 250, "2.")
}

func TestBareLineEndsInCommands(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, send string }{
		{"bare LF", "NOOP\n"},
		{"bare LF after EHLO", "EHLO client.sekali.test\r\nNOOP\n"},
		{"bare CR", "NOOP\rNOOP\r\n"},
		{"CR CR LF", "NOOP\r\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := dialRaw(t, start(t, smtpsink.Config{}))
			c.send(tt.send)
			if strings.HasPrefix(tt.send, "EHLO") {
				c.wantReply(250, "")
			}
			c.wantReply(500, "5.5.2")
			// A line ending the sink cannot trust ends the session, as in
			// Postfix: what follows might be smuggled commands.
			c.wantClosed()
		})
	}
}

func TestCommandsMustBeUTF8(t *testing.T) {
	t.Parallel()
	c := dialRaw(t, start(t, smtpsink.Config{}))
	c.ehlo()
	c.cmd("NOOP \xff\xfe", 500, "5.5.2")
	c.cmd("NOOP olá", 250, "2.0.0")
}

func TestCommandOrder(t *testing.T) {
	t.Parallel()
	srv := start(t, smtpsink.Config{})
	c := dialRaw(t, srv)

	c.cmd("MAIL FROM:<"+sender+">", 503, "5.5.1")
	c.cmd("RCPT TO:<rcpt@sekali.test>", 503, "5.5.1")
	c.cmd("DATA", 503, "5.5.1")
	c.ehlo()
	c.cmd("RCPT TO:<rcpt@sekali.test>", 503, "5.5.1")
	c.cmd("DATA", 503, "5.5.1")
	c.cmd("MAIL FROM:<"+sender+">", 250, "2.")
	c.cmd("DATA", 503, "5.5.1")
	// A refused BDAT's chunk is skipped, not taken for a command.
	c.send("BDAT 10 LAST\r\nNOOP\r\nNOOP")
	c.wantReply(503, "5.5.1")
	c.cmd("MAIL FROM:<"+sender+">", 503, "5.5.1") // nested MAIL
	c.cmd("RCPT TO:<rcpt@sekali.test>", 250, "2.")
	c.cmd("MAIL FROM:<"+sender+">", 503, "5.5.1")
	c.cmd("RSET", 250, "2.")
	c.cmd("RCPT TO:<rcpt@sekali.test>", 503, "5.5.1")
	c.cmd("MAIL FROM:<"+sender+">", 250, "2.")
	c.cmd("RCPT TO:<rcpt@sekali.test>", 250, "2.")
	c.cmd("EHLO client.sekali.test", 250, "") // ends the transaction too
	c.cmd("DATA", 503, "5.5.1")
	if n := srv.Count(); n != 0 {
		t.Errorf("recorded %d messages, want 0", n)
	}
}

func TestBDATChunksPassWhole(t *testing.T) {
	t.Parallel()
	srv := start(t, smtpsink.Config{})
	c := dialRaw(t, srv)
	c.ehlo()
	c.cmd("MAIL FROM:<"+sender+"> BODY=8BITMIME", 250, "2.")
	c.cmd("RCPT TO:<rcpt@sekali.test>", 250, "2.")

	// Lines no command may be (too long, an unbracketed path), in a chunk
	// that ends mid-line, pipelined with the next chunk and with a command
	// that must still be checked.
	msg := header + line(900) + "MAIL FROM:shop@example.test\r\nbye\r\n"
	first, last := msg[:len(header)+700], msg[len(header)+700:]
	c.send(fmt.Sprintf("BDAT %d\r\n%sBDAT %d LAST\r\n%sMAIL FROM:shop@example.test\r\n", len(first), first, len(last), last))
	c.wantReply(250, "2.0.0")
	c.wantReply(250, "2.0.0")
	c.wantReply(501, "5.5.4")
	c.cmd("NOOP", 250, "2.0.0")

	got := srv.ByMessageID("strict@sekali.test")
	if len(got) != 1 || string(got[0].Data) != msg {
		t.Fatalf("recorded %+v, want the message sent in two chunks", got)
	}
}

func TestMessageTextRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		params, text string
		wantCode     int
		wantEnhanced string
	}{
		{"line of 1000 octets", "", header + line(1000), 250, "2.0.0"},
		{"line of 1001 octets", "", header + line(1001), 550, "5.5.2"},
		{"line of 3000 octets", "", header + line(3000), 550, "5.5.2"}, // past go-smtp's own limit
		{"header line of 1001 octets", "", "X-Long: " + line(1001-len("X-Long: ")) + header, 550, "5.5.2"},
		{"stuffed dot not counted", "", header + ".." + line(999), 250, "2.0.0"},
		{"bare LF", "", header + "one\ntwo\r\n", 550, "5.5.2"},
		{"bare LF in the header", "", "Subject: strict\n" + header, 550, "5.5.2"},
		{"bare LF before a dot", "", header + "one\n.\r\nRSET\r\n", 550, "5.5.2"},
		{"bare CR", "", header + "one\rtwo\r\n", 550, "5.5.2"},
		{"8-bit body without BODY", "", header + "olá\r\n", 550, "5.6.0"},
		{"8-bit body with BODY=7BIT", " BODY=7BIT", header + "olá\r\n", 550, "5.6.0"},
		{"8-bit body with BODY=8BITMIME", " BODY=8BITMIME", header + "olá\r\n", 250, "2.0.0"},
		{"8-bit header without SMTPUTF8", " BODY=8BITMIME", "X-Greeting: olá\r\n" + header + "hi\r\n", 550, "5.6.0"},
		{"8-bit header with SMTPUTF8", " BODY=8BITMIME SMTPUTF8", "X-Greeting: olá\r\n" + header + "hi\r\n", 250, "2.0.0"},
		{"8-bit header with SMTPUTF8 without BODY", " SMTPUTF8", "X-Greeting: olá\r\n" + header + "hi\r\n", 550, "5.6.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var hookCalls atomic.Int32
			srv := start(t, smtpsink.Config{OnData: func(*smtpsink.Message) error { hookCalls.Add(1); return nil }})
			c := dialRaw(t, srv)
			c.ehlo()
			c.cmd("MAIL FROM:<"+sender+">"+tt.params, 250, "2.")
			c.cmd("RCPT TO:<rcpt@sekali.test>", 250, "2.")
			c.cmd("DATA", 354, "")
			c.send(tt.text + ".\r\n")
			c.wantReply(tt.wantCode, tt.wantEnhanced)

			want := 0
			if tt.wantCode == 250 {
				want = 1
			}
			if n := srv.Count(); n != want {
				t.Errorf("recorded %d messages, want %d", n, want)
			}
			if n := hookCalls.Load(); n != int32(want) {
				t.Errorf("OnData called %d times, want %d: a refused message reaches no hook", n, want)
			}
			// The session goes on, and nothing of the text was taken for a command.
			c.cmd("NOOP", 250, "2.0.0")
		})
	}
}

func TestNonASCIIAddressesNeedSMTPUTF8(t *testing.T) {
	t.Parallel()
	srv := start(t, smtpsink.Config{})
	c := dialRaw(t, srv)
	c.ehlo()
	c.cmd("MAIL FROM:<loja@exemplo.pt> SMTPUTF8", 250, "2.")
	c.cmd("RSET", 250, "2.")
	c.cmd("MAIL FROM:<ação@exemplo.pt>", 553, "5.6.7")
	c.cmd("MAIL FROM:<"+sender+">", 250, "2.")
	c.cmd("RCPT TO:<ana@exämple.com>", 553, "5.6.7")
	c.cmd("RSET", 250, "2.")
	c.cmd("MAIL FROM:<ação@exemplo.pt> SMTPUTF8", 250, "2.")
	c.cmd("RCPT TO:<ana@exämple.com>", 250, "2.")
}

func TestHook421ClosesTheConnection(t *testing.T) {
	t.Parallel()
	closing := func() error {
		return &gosmtp.SMTPError{Code: 421, EnhancedCode: gosmtp.EnhancedCode{4, 3, 2}, Message: "closing"}
	}
	tests := []struct {
		name string
		cfg  smtpsink.Config
	}{
		{"OnMail", smtpsink.Config{OnMail: func(string) error { return closing() }}},
		{"OnRcpt", smtpsink.Config{OnRcpt: func(string) error { return closing() }}},
		{"OnRcpt wrapped", smtpsink.Config{OnRcpt: func(string) error { return fmt.Errorf("look up: %w", closing()) }}},
		{"OnData", smtpsink.Config{OnData: func(*smtpsink.Message) error { return closing() }}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := start(t, tt.cfg)
			c := dialRaw(t, srv)
			c.ehlo()
			// Each command but DATA is followed by a pipelined NOOP, which
			// must stay unanswered after a 421.
			steps := []struct {
				send string
				want int
			}{
				{"MAIL FROM:<" + sender + ">\r\n", 250},
				{"RCPT TO:<rcpt@sekali.test>\r\n", 250},
				{"DATA\r\n", 354},
				{header + "hi\r\n.\r\n", 250},
			}
			for _, step := range steps {
				noop := step.want != 354
				if noop {
					c.send(step.send + "NOOP\r\n")
				} else {
					c.send(step.send)
				}
				code, text, err := c.text.ReadResponse(0)
				if err != nil {
					t.Fatalf("reply to %.20q: %v", step.send, err)
				}
				if code == 421 {
					c.wantClosed()
					if n := srv.Count(); n != 0 {
						t.Errorf("recorded %d messages, want 0", n)
					}
					return
				}
				if code != step.want {
					t.Fatalf("reply to %.20q: %d %s, want %d", step.send, code, text, step.want)
				}
				if noop {
					c.wantReply(250, "2.0.0")
				}
			}
			t.Fatalf("no 421 in the whole session")
		})
	}
}
