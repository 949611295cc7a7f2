package smtpsink_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/smtp"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/sekali-dev/sekali/internal/smtpsink"
)

// waitLimit bounds every wait so that a broken sink fails the test instead of
// hanging it. It is a guard, not a timing expectation.
const waitLimit = 10 * time.Second

const sender = "sender@sekali.test"

func start(t *testing.T, cfg smtpsink.Config) *smtpsink.Server {
	t.Helper()
	srv, err := smtpsink.Start(cfg)
	if err != nil {
		t.Fatalf("start sink: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close sink: %v", err)
		}
	})
	return srv
}

// dial opens an SMTP connection to srv and says EHLO.
func dial(t *testing.T, srv *smtpsink.Server) *smtp.Client {
	t.Helper()
	c, err := smtp.Dial(srv.Addr())
	if err != nil {
		t.Fatalf("dial sink: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Hello("client.sekali.test"); err != nil {
		t.Fatalf("EHLO: %v", err)
	}
	return c
}

func rawMessage(messageID, to, subject string) string {
	return "From: Sekali <" + sender + ">\r\n" +
		"To: " + to + "\r\n" +
		"Subject: " + subject + "\r\n" +
		"Message-ID: <" + messageID + ">\r\n" +
		"\r\n" +
		"Hello,\r\n.leading dot\r\nbye\r\n"
}

// send runs one mail transaction and returns the text of the reply to the
// final dot (net/smtp's Data hides it, so writeData speaks DATA through c.Text).
func send(c *smtp.Client, to []string, msg string) (string, error) {
	if err := c.Mail(sender); err != nil {
		return "", fmt.Errorf("MAIL FROM: %w", err)
	}
	for _, rcpt := range to {
		if err := c.Rcpt(rcpt); err != nil {
			return "", fmt.Errorf("RCPT TO %s: %w", rcpt, err)
		}
	}
	return writeData(c, msg)
}

// writeData sends DATA and msg, and returns the text of the reply to the final dot.
func writeData(c *smtp.Client, msg string) (string, error) {
	id, err := c.Text.Cmd("DATA")
	if err != nil {
		return "", fmt.Errorf("DATA: %w", err)
	}
	c.Text.StartResponse(id)
	_, _, err = c.Text.ReadResponse(354)
	c.Text.EndResponse(id)
	if err != nil {
		return "", fmt.Errorf("DATA: %w", err)
	}
	w := c.Text.DotWriter()
	if _, err := io.WriteString(w, msg); err != nil {
		return "", fmt.Errorf("write message: %w", err)
	}
	if err := w.Close(); err != nil {
		return "", fmt.Errorf("end message: %w", err)
	}
	_, text, err := c.Text.ReadResponse(250)
	if err != nil {
		return "", fmt.Errorf("reply to message: %w", err)
	}
	return text, nil
}

// receive returns the next value from ch, failing the test after waitLimit.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

func TestAcceptAndRecord(t *testing.T) {
	t.Parallel()
	srv := start(t, smtpsink.Config{})
	if got, want := srv.Addr(), net.JoinHostPort(srv.Host(), strconv.Itoa(srv.Port())); got != want {
		t.Errorf("Addr() = %q, Host and Port make %q", got, want)
	}

	c := dial(t, srv)
	for _, ext := range []string{"8BITMIME", "SMTPUTF8", "PIPELINING"} {
		if ok, _ := c.Extension(ext); !ok {
			t.Errorf("EHLO does not advertise %s", ext)
		}
	}
	msg := rawMessage("abc.123@sekali.test", "Rcpt@Example.com", "Your order")
	reply, err := send(c, []string{"Rcpt@Example.com"}, msg)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if err := c.Quit(); err != nil {
		t.Errorf("QUIT: %v", err)
	}

	msgs := srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("recorded %d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if m.From != sender || !slices.Equal(m.To, []string{"Rcpt@Example.com"}) {
		t.Errorf("envelope = %q -> %q, want %q -> [Rcpt@Example.com]", m.From, m.To, sender)
	}
	if string(m.Data) != msg {
		t.Errorf("Data = %q, want %q", m.Data, msg)
	}
	if got := m.Header.Get("Subject"); got != "Your order" {
		t.Errorf("Subject header = %q, want %q", got, "Your order")
	}
	if m.MessageID != "abc.123@sekali.test" {
		t.Errorf("MessageID = %q, want abc.123@sekali.test", m.MessageID)
	}
	if _, err := hex.DecodeString(m.QueueID); err != nil || len(m.QueueID) != 16 {
		t.Errorf("QueueID = %q, want 16 hex digits", m.QueueID)
	}
	if want := "queued as " + m.QueueID; !strings.Contains(reply, want) {
		t.Errorf("reply to DATA = %q, want it to contain %q", reply, want)
	}
	if m.Dropped || m.ReceivedAt.IsZero() {
		t.Errorf("Dropped = %v, ReceivedAt = %v; want false and a time", m.Dropped, m.ReceivedAt)
	}

	if n := len(srv.ByMessageID("<abc.123@sekali.test>")); n != 1 {
		t.Errorf("ByMessageID with brackets found %d, want 1", n)
	}
	if n := len(srv.ByMessageID("other@sekali.test")); n != 0 {
		t.Errorf("ByMessageID(other) found %d, want 0", n)
	}
	if n := len(srv.ByRecipient("rcpt@example.COM")); n != 1 {
		t.Errorf("ByRecipient ignoring case found %d, want 1", n)
	}

	msgs[0].To[0] = "changed@sekali.test"
	msgs[0].Header["Subject"][0] = "changed"
	if again := srv.Messages()[0]; again.To[0] != "Rcpt@Example.com" || again.Header.Get("Subject") != "Your order" {
		t.Errorf("changing a returned message changed the record: %+v", again)
	}
}

func TestSeveralMessagesOnOneConnection(t *testing.T) {
	t.Parallel()
	srv := start(t, smtpsink.Config{})
	c := dial(t, srv)

	if _, err := send(c, []string{"a@sekali.test"}, rawMessage("1@sekali.test", "a@sekali.test", "one")); err != nil {
		t.Fatalf("send first: %v", err)
	}
	// A transaction abandoned with RSET leaves nothing behind.
	if err := c.Mail(sender); err != nil {
		t.Fatalf("MAIL FROM: %v", err)
	}
	if err := c.Rcpt("abandoned@sekali.test"); err != nil {
		t.Fatalf("RCPT TO: %v", err)
	}
	if err := c.Reset(); err != nil {
		t.Fatalf("RSET: %v", err)
	}
	if _, err := send(c, []string{"b@sekali.test"}, rawMessage("2@sekali.test", "b@sekali.test", "two")); err != nil {
		t.Fatalf("send second: %v", err)
	}
	if _, err := send(c, []string{"c@sekali.test"}, rawMessage("3@sekali.test", "c@sekali.test", "three")); err != nil {
		t.Fatalf("send third: %v", err)
	}

	if n := srv.Connections(); n != 1 {
		t.Errorf("Connections() = %d, want 1", n)
	}
	msgs := srv.Messages()
	if len(msgs) != 3 {
		t.Fatalf("recorded %d messages, want 3", len(msgs))
	}
	for i, want := range []string{"a@sekali.test", "b@sekali.test", "c@sekali.test"} {
		if !slices.Equal(msgs[i].To, []string{want}) {
			t.Errorf("message %d went to %q, want [%s]", i, msgs[i].To, want)
		}
	}
	if msgs[0].QueueID == msgs[1].QueueID || msgs[1].QueueID == msgs[2].QueueID {
		t.Errorf("queue ids repeat: %s %s %s", msgs[0].QueueID, msgs[1].QueueID, msgs[2].QueueID)
	}
}

func TestHookErrorsBecomeReplies(t *testing.T) {
	t.Parallel()
	refuse := func(code int, text string) error {
		return &gosmtp.SMTPError{Code: code, EnhancedCode: gosmtp.EnhancedCode{code / 100, 0, 0}, Message: text}
	}
	tests := []struct {
		name     string
		cfg      smtpsink.Config
		wantCode int
	}{
		{"OnMail 550", smtpsink.Config{OnMail: func(string) error { return refuse(550, "sender refused") }}, 550},
		{"OnRcpt 550", smtpsink.Config{OnRcpt: func(string) error { return refuse(550, "no such user") }}, 550},
		{"OnRcpt 451", smtpsink.Config{OnRcpt: func(string) error { return refuse(451, "try again later") }}, 451},
		{"OnRcpt wrapped 550", smtpsink.Config{OnRcpt: func(string) error {
			return fmt.Errorf("look up mailbox: %w", refuse(550, "no such user"))
		}}, 550},
		{"OnRcpt plain error", smtpsink.Config{OnRcpt: func(string) error { return errors.New("directory down") }}, 451},
		{"OnData 451", smtpsink.Config{OnData: func(*smtpsink.Message) error { return refuse(451, "greylisted") }}, 451},
		{"OnData 554", smtpsink.Config{OnData: func(*smtpsink.Message) error { return refuse(554, "spam") }}, 554},
		{"OnData plain error", smtpsink.Config{OnData: func(*smtpsink.Message) error { return errors.New("disk full") }}, 451},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := start(t, tt.cfg)
			c := dial(t, srv)

			_, err := send(c, []string{"rcpt@sekali.test"}, rawMessage("x@sekali.test", "rcpt@sekali.test", "hi"))
			var protoErr *textproto.Error
			if !errors.As(err, &protoErr) || protoErr.Code != tt.wantCode {
				t.Fatalf("send: %v; want a %d reply", err, tt.wantCode)
			}
			if n := srv.Count(); n != 0 {
				t.Errorf("recorded %d messages, want 0", n)
			}
			// The connection stays usable after a rejection.
			if err := c.Reset(); err != nil {
				t.Errorf("RSET after rejection: %v", err)
			}
		})
	}
}

func TestRejectedRecipientLeavesOthers(t *testing.T) {
	t.Parallel()
	srv := start(t, smtpsink.Config{OnRcpt: func(to string) error {
		if to == "gone@sekali.test" {
			return &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
		}
		return nil
	}})
	c := dial(t, srv)

	if err := c.Mail(sender); err != nil {
		t.Fatalf("MAIL FROM: %v", err)
	}
	if err := c.Rcpt("gone@sekali.test"); err == nil {
		t.Fatalf("RCPT TO gone@sekali.test succeeded, want 550")
	}
	if err := c.Rcpt("here@sekali.test"); err != nil {
		t.Fatalf("RCPT TO here@sekali.test: %v", err)
	}
	if _, err := writeData(c, rawMessage("y@sekali.test", "here@sekali.test", "hi")); err != nil {
		t.Fatalf("DATA: %v", err)
	}
	msgs := srv.Messages()
	if len(msgs) != 1 || !slices.Equal(msgs[0].To, []string{"here@sekali.test"}) {
		t.Fatalf("recorded %+v, want one message to here@sekali.test", msgs)
	}
}

func TestDataDelayHoldsReplyAndRecord(t *testing.T) {
	t.Parallel()
	stalled := make(chan struct{})
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	srv := start(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration {
		close(stalled) // one message only in this test
		<-release
		return time.Millisecond
	}})
	t.Cleanup(releaseOnce) // runs before the sink's Close, should the test fail early
	c := dial(t, srv)

	type result struct {
		reply string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		reply, err := send(c, []string{"rcpt@sekali.test"}, rawMessage("slow@sekali.test", "rcpt@sekali.test", "slow"))
		done <- result{reply, err}
	}()

	receive(t, stalled, "the sink to stall")
	if n := srv.Count(); n != 0 {
		t.Errorf("recorded %d messages during the stall, want 0", n)
	}
	select {
	case r := <-done:
		t.Fatalf("client got reply %q (%v) during the stall", r.reply, r.err)
	default:
	}

	releaseOnce()
	r := receive(t, done, "the reply to DATA")
	if r.err != nil {
		t.Fatalf("send: %v", r.err)
	}
	if n := srv.Count(); n != 1 {
		t.Errorf("recorded %d messages after the reply, want 1", n)
	}
}

func TestDropAfterData(t *testing.T) {
	t.Parallel()
	srv := start(t, smtpsink.Config{DropAfterData: func(m *smtpsink.Message) bool {
		return m.Header.Get("Subject") == "drop me"
	}})
	c := dial(t, srv)

	if err := c.Mail(sender); err != nil {
		t.Fatalf("MAIL FROM: %v", err)
	}
	if err := c.Rcpt("rcpt@sekali.test"); err != nil {
		t.Fatalf("RCPT TO: %v", err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatalf("DATA: %v", err)
	}
	if _, err := io.WriteString(w, rawMessage("dropped@sekali.test", "rcpt@sekali.test", "drop me")); err != nil {
		t.Fatalf("write message: %v", err)
	}
	err = w.Close()
	var protoErr *textproto.Error
	if err == nil || errors.As(err, &protoErr) {
		t.Fatalf("closing the message = %v; want a broken connection, not a reply", err)
	}

	got := srv.ByMessageID("dropped@sekali.test")
	if len(got) != 1 || !got[0].Dropped || got[0].QueueID == "" {
		t.Fatalf("recorded %+v, want one dropped message with a queue id", got)
	}

	// The sink goes on serving new connections.
	c2 := dial(t, srv)
	if _, err := send(c2, []string{"rcpt@sekali.test"}, rawMessage("kept@sekali.test", "rcpt@sekali.test", "keep me")); err != nil {
		t.Fatalf("send after drop: %v", err)
	}
	if kept := srv.ByMessageID("kept@sekali.test"); len(kept) != 1 || kept[0].Dropped {
		t.Errorf("recorded %+v, want one kept message", kept)
	}
	if n := srv.Connections(); n != 2 {
		t.Errorf("Connections() = %d, want 2", n)
	}
}

func TestWaitForCount(t *testing.T) {
	t.Parallel()
	srv := start(t, smtpsink.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()

	waited := make(chan error, 1)
	go func() { waited <- srv.WaitForCount(ctx, 2) }()

	c := dial(t, srv)
	if _, err := send(c, []string{"rcpt@sekali.test"}, rawMessage("1@sekali.test", "rcpt@sekali.test", "one")); err != nil {
		t.Fatalf("send first: %v", err)
	}
	select {
	case err := <-waited:
		t.Fatalf("WaitForCount(2) returned %v with 1 message recorded", err)
	default:
	}
	if _, err := send(c, []string{"rcpt@sekali.test"}, rawMessage("2@sekali.test", "rcpt@sekali.test", "two")); err != nil {
		t.Fatalf("send second: %v", err)
	}
	if err := receive(t, waited, "WaitForCount(2)"); err != nil {
		t.Fatalf("WaitForCount(2): %v", err)
	}

	if err := srv.WaitForCount(ctx, 2); err != nil {
		t.Errorf("WaitForCount when already reached: %v", err)
	}
	canceled, cancelNow := context.WithCancel(t.Context())
	cancelNow()
	if err := srv.WaitForCount(canceled, 3); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitForCount with a canceled context = %v, want context.Canceled", err)
	}
}

func TestCloseWithOpenConnection(t *testing.T) {
	t.Parallel()
	srv := start(t, smtpsink.Config{})
	c := dial(t, srv)
	if err := c.Noop(); err != nil {
		t.Fatalf("NOOP: %v", err)
	}

	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	if err := receive(t, closed, "Close"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Noop(); err == nil {
		t.Errorf("NOOP after Close succeeded, want a broken connection")
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestCloseEndsDataDelay(t *testing.T) {
	t.Parallel()
	stalled := make(chan struct{})
	srv := start(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration {
		close(stalled)
		return time.Hour
	}})
	c := dial(t, srv)

	sent := make(chan error, 1)
	go func() {
		_, err := send(c, []string{"rcpt@sekali.test"}, rawMessage("late@sekali.test", "rcpt@sekali.test", "late"))
		sent <- err
	}()
	receive(t, stalled, "the sink to stall")

	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	if err := receive(t, closed, "Close during a stall"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := receive(t, sent, "the client"); err == nil {
		t.Errorf("send succeeded although the sink closed during the stall")
	}
	if n := srv.Count(); n != 0 {
		t.Errorf("recorded %d messages, want 0", n)
	}
}

// Past its rate limit the sink refuses MAIL FROM, as a relay does, with
// 421 4.7.0 and the end of the session by default; every connection
// shares the limit.
func TestRateLimitRefusesMail(t *testing.T) {
	t.Parallel()
	srv := start(t, smtpsink.Config{RateLimit: smtpsink.RateLimit{Messages: 2, Per: time.Hour}})
	for i, c := range []*smtp.Client{dial(t, srv), dial(t, srv)} {
		if _, err := send(c, []string{"rcpt@sekali.test"}, rawMessage(fmt.Sprintf("r%d@sekali.test", i), "rcpt@sekali.test", "hi")); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	c := dial(t, srv)
	err := c.Mail(sender)
	var protoErr *textproto.Error
	if !errors.As(err, &protoErr) || protoErr.Code != 421 || !strings.HasPrefix(protoErr.Msg, "4.7.0 Rate limit exceeded") {
		t.Fatalf("third MAIL FROM: %v, want 421 4.7.0 Rate limit exceeded", err)
	}
	if err := c.Noop(); err == nil {
		t.Error("the session went on after 421")
	}
	if srv.Count() != 2 || srv.RateLimited() != 1 {
		t.Errorf("%d messages, %d refused by rate; want 2 and 1", srv.Count(), srv.RateLimited())
	}
}

// A 451 4.7.1 rate reply leaves the session open, and the window slides:
// once the oldest message leaves it, MAIL is taken again.
func TestRateLimitWith451AndASlidingWindow(t *testing.T) {
	t.Parallel()
	reply := &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 7, 1}, Message: "rate limit exceeded, try again later"}
	srv := start(t, smtpsink.Config{RateLimit: smtpsink.RateLimit{Messages: 1, Per: 100 * time.Millisecond, Reply: reply}})
	c := dial(t, srv)
	if _, err := send(c, []string{"rcpt@sekali.test"}, rawMessage("a@sekali.test", "rcpt@sekali.test", "hi")); err != nil {
		t.Fatal(err)
	}
	err := c.Mail(sender)
	var protoErr *textproto.Error
	if !errors.As(err, &protoErr) || protoErr.Code != 451 || !strings.HasPrefix(protoErr.Msg, "4.7.1 ") {
		t.Fatalf("second MAIL FROM within the window: %v, want 451 4.7.1", err)
	}
	deadline := time.Now().Add(waitLimit)
	for err != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // a retry's pause, not an expectation of timing
		err = c.Mail(sender)
	}
	if err != nil {
		t.Fatalf("MAIL FROM after the window: %v", err)
	}
	if err := c.Rcpt("rcpt@sekali.test"); err != nil {
		t.Fatal(err)
	}
	if _, err := writeData(c, rawMessage("b@sekali.test", "rcpt@sekali.test", "hi")); err != nil {
		t.Fatal(err)
	}
	if srv.Count() != 2 || srv.RateLimited() == 0 {
		t.Errorf("%d messages, %d refused by rate; want 2 and some", srv.Count(), srv.RateLimited())
	}
}
