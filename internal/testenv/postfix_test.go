package testenv_test

import (
	"errors"
	"net/smtp"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/testenv"
)

// The private Postfix relays what it takes to the test's Mailpit, and
// refuses a client over its limits as a shop's relay does.
func TestPostfixRelaysAndLimits(t *testing.T) {
	t.Parallel()
	mp := testenv.StartMailpit(t, testenv.MailpitOptions{})
	pf := testenv.StartPostfix(t, mp.SMTPAddr(), testenv.PostfixOptions{MessageRateLimit: 2, ConnectionCountLimit: 1, RateTimeUnit: time.Hour})

	c, err := smtp.Dial(pf.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(to string) error {
		if err := c.Mail("orders@shop.example"); err != nil {
			return err
		}
		if err := c.Rcpt(to); err != nil {
			return err
		}
		w, err := c.Data()
		if err != nil {
			return err
		}
		if _, err := w.Write([]byte("Subject: hello\r\n\r\nhi\r\n")); err != nil {
			return err
		}
		return w.Close()
	}
	for _, to := range []string{"ana@example.com", "budi@example.com"} {
		if err := send(to); err != nil {
			t.Fatalf("send to %s: %v", to, err)
		}
	}
	mp.WaitForCount(t, 2, 10*time.Second)

	// The third MAIL FROM within the hour: too much mail.
	var perr *textproto.Error
	if err := send("citra@example.com"); !errors.As(err, &perr) || perr.Code != 450 || !strings.HasPrefix(perr.Msg, "4.7.1 Error: too much mail from") {
		t.Errorf("third message: %v, want 450 4.7.1 Error: too much mail", err)
	}
	// A second connection while the first is open: too many connections.
	if _, err := smtp.Dial(pf.Addr()); !errors.As(err, &perr) || perr.Code != 421 || !strings.Contains(perr.Msg, "4.7.0 relay.sekali.test Error: too many connections from 127.0.0.1") {
		t.Errorf("second connection: %v, want 421 4.7.0 … too many connections", err)
	}
	testenv.WaitFor(t, "the warnings in the log", 5*time.Second, func() bool {
		return pf.Count(testenv.PostfixMessageRate) == 1 && pf.Count(testenv.PostfixConnectionCount) == 1 && pf.Count(testenv.PostfixConnect) == 2
	})
}
