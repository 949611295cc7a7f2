package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/smtp"
	"net/textproto"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests drive a real Mailpit with Go's own SMTP client.

func TestMailpitPlainDelivery(t *testing.T) {
	t.Parallel()
	m := StartMailpit(t, MailpitOptions{})

	c := dialMailpit(t, m)
	for _, ext := range []string{"8BITMIME", "SMTPUTF8"} {
		if ok, _ := c.Extension(ext); !ok {
			t.Errorf("Mailpit does not offer %s", ext)
		}
	}
	if ok, _ := c.Extension("PIPELINING"); ok {
		t.Error("Mailpit offers PIPELINING; the notes in mailpit.go say it does not")
	}
	id := newMessageID()
	if err := sendVia(c, "shop@sekali.test", "Buyer@Example.test", testMail(id, "Order confirmed")); err != nil {
		t.Fatalf("send: %v", err)
	}

	m.WaitForCount(t, 1, 5*time.Second)
	if n := m.CountByMessageID(t, "<"+id+">"); n != 1 {
		t.Fatalf("CountByMessageID(%s) = %d, want 1", id, n)
	}
	got := m.ByRecipient(t, "buyer@example.test")
	if len(got) != 1 || got[0].MessageID != id || got[0].Subject != "Order confirmed" || got[0].From != "shop@sekali.test" {
		t.Fatalf("ByRecipient = %+v", got)
	}
	h := m.Headers(t, got[0].ID)
	if h.Get("Message-Id") != "<"+id+">" || h.Get("Received") == "" {
		t.Fatalf("headers of %s: %v", got[0].ID, h)
	}

	// The search matches substrings; CountByMessageID does not.
	if n := m.CountByMessageID(t, id[:8]); n != 0 {
		t.Fatalf("CountByMessageID(prefix of %s) = %d, want 0", id, n)
	}
	// A second delivery of the same message is kept: duplicates show.
	if err := sendVia(dialMailpit(t, m), "shop@sekali.test", "buyer@example.test", testMail(id, "Order confirmed")); err != nil {
		t.Fatalf("send again: %v", err)
	}
	if n := m.CountByMessageID(t, id); n != 2 {
		t.Fatalf("CountByMessageID after a second delivery = %d, want 2", n)
	}
	if n := len(m.Messages(t)); n != 2 {
		t.Fatalf("Messages: %d, want 2", n)
	}
}

func TestMailpitRefusesMailFromWithoutAngleBrackets(t *testing.T) {
	t.Parallel()
	m := StartMailpit(t, MailpitOptions{})
	c := dialMailpit(t, m)
	if err := c.Hello("sekali-test"); err != nil {
		t.Fatal(err)
	}
	id, err := c.Text.Cmd("MAIL FROM:a@b")
	if err != nil {
		t.Fatal(err)
	}
	c.Text.StartResponse(id)
	_, _, err = c.Text.ReadResponse(250)
	c.Text.EndResponse(id)
	wantReply(t, err, 501, "5.5.4 Syntax error in parameters or arguments (invalid FROM parameter)")
}

func TestMailpitTLS(t *testing.T) {
	t.Parallel()
	m := StartMailpit(t, MailpitOptions{TLS: true})
	if m.CAFile == "" {
		t.Fatal("no CAFile")
	}

	t.Run("required", func(t *testing.T) {
		c := dialMailpit(t, m)
		if ok, _ := c.Extension("STARTTLS"); !ok {
			t.Fatal("no STARTTLS offered")
		}
		wantReply(t, c.Mail("shop@sekali.test"), 530, "5.7.0 Must issue a STARTTLS command first")
	})
	t.Run("trusted CA", func(t *testing.T) {
		for _, name := range []string{"127.0.0.1", "localhost"} {
			c := dialMailpit(t, m)
			if err := c.StartTLS(&tls.Config{RootCAs: m.CertPool(t), ServerName: name}); err != nil {
				t.Fatalf("STARTTLS as %s: %v", name, err)
			}
			if err := sendVia(c, "shop@sekali.test", "buyer@example.test", testMail(newMessageID(), "over TLS")); err != nil {
				t.Fatalf("send over TLS: %v", err)
			}
		}
		m.WaitForCount(t, 2, 5*time.Second)
	})
	t.Run("untrusted CA", func(t *testing.T) {
		c := dialMailpit(t, m)
		err := c.StartTLS(&tls.Config{ServerName: "127.0.0.1"}) // the system's CAs
		if !errors.As(err, new(x509.UnknownAuthorityError)) {
			t.Fatalf("STARTTLS without the test CA: %v, want an unknown-authority error", err)
		}
	})
}

func TestMailpitAuth(t *testing.T) {
	t.Parallel()
	users := map[string]string{"sekali": "s3cret-pw", "other": "pw2"}

	t.Run("after STARTTLS", func(t *testing.T) {
		t.Parallel()
		m := StartMailpit(t, MailpitOptions{TLS: true, Auth: users})
		startTLS := func(c *smtp.Client) {
			t.Helper()
			if err := c.StartTLS(&tls.Config{RootCAs: m.CertPool(t), ServerName: m.Host}); err != nil {
				t.Fatal(err)
			}
		}

		c := dialMailpit(t, m)
		wantReply(t, c.Auth(smtp.PlainAuth("", "sekali", "s3cret-pw", m.Host)), 530, "Must issue a STARTTLS command first")

		c = dialMailpit(t, m)
		startTLS(c)
		wantReply(t, c.Mail("shop@sekali.test"), 530, "5.7.0 Authentication required")

		c = dialMailpit(t, m)
		startTLS(c)
		wantReply(t, c.Auth(smtp.PlainAuth("", "sekali", "wrong", m.Host)), 535, "5.7.8 Authentication credentials invalid")

		c = dialMailpit(t, m)
		startTLS(c)
		if err := c.Auth(smtp.PlainAuth("", "sekali", "s3cret-pw", m.Host)); err != nil {
			t.Fatalf("AUTH with the right password: %v", err)
		}
		id := newMessageID()
		if err := sendVia(c, "shop@sekali.test", "buyer@example.test", testMail(id, "authenticated")); err != nil {
			t.Fatal(err)
		}
		if got := m.ByRecipient(t, "buyer@example.test"); len(got) != 1 || got[0].Username != "sekali" {
			t.Fatalf("messages: %+v, want one from user sekali", got)
		}
	})

	t.Run("without TLS", func(t *testing.T) {
		t.Parallel()
		m := StartMailpit(t, MailpitOptions{Auth: users})
		wantReply(t, dialMailpit(t, m).Mail("shop@sekali.test"), 530, "5.7.0 Authentication required")
		wantReply(t, dialMailpit(t, m).Auth(smtp.PlainAuth("", "other", "s3cret-pw", m.Host)), 535, "5.7.8")
		c := dialMailpit(t, m)
		if err := c.Auth(smtp.PlainAuth("", "other", "pw2", m.Host)); err != nil {
			t.Fatalf("AUTH with the right password: %v", err)
		}
		if err := sendVia(c, "shop@sekali.test", "buyer@example.test", testMail(newMessageID(), "plain auth")); err != nil {
			t.Fatal(err)
		}
		m.WaitForCount(t, 1, 5*time.Second)
	})
}

func TestMailpitChaos(t *testing.T) {
	t.Parallel()
	m := StartMailpit(t, MailpitOptions{Chaos: true, Auth: map[string]string{"sekali": "pw"}})
	login := func() *smtp.Client {
		t.Helper()
		c := dialMailpit(t, m)
		if err := c.Auth(smtp.PlainAuth("", "sekali", "pw", m.Host)); err != nil {
			t.Fatalf("AUTH: %v", err)
		}
		return c
	}

	m.SetChaos(t, MailpitChaos{Authentication: &MailpitTrigger{ErrorCode: 454, Probability: 100}})
	wantReply(t, dialMailpit(t, m).Auth(smtp.PlainAuth("", "sekali", "pw", m.Host)), 454, "Chaos authentication error")

	m.SetChaos(t, MailpitChaos{Sender: &MailpitTrigger{ErrorCode: 451, Probability: 100}})
	wantReply(t, login().Mail("shop@sekali.test"), 451, "Chaos sender error")

	m.SetChaos(t, MailpitChaos{Recipient: &MailpitTrigger{ErrorCode: 550, Probability: 100}})
	c := login()
	if err := c.Mail("shop@sekali.test"); err != nil {
		t.Fatalf("MAIL with only a recipient trigger: %v", err)
	}
	wantReply(t, c.Rcpt("buyer@example.test"), 550, "Chaos recipient error")

	m.ClearChaos(t)
	id := newMessageID()
	if err := sendVia(login(), "shop@sekali.test", "buyer@example.test", testMail(id, "after chaos")); err != nil {
		t.Fatalf("send after ClearChaos: %v", err)
	}
	if n := m.CountByMessageID(t, id); n != 1 {
		t.Fatalf("CountByMessageID = %d, want 1", n)
	}
}

func TestMailpitAllowedRecipients(t *testing.T) {
	t.Parallel()
	m := StartMailpit(t, MailpitOptions{AllowedRecipients: `@allowed\.test$`})
	c := dialMailpit(t, m)
	if err := c.Mail("shop@sekali.test"); err != nil {
		t.Fatal(err)
	}
	wantReply(t, c.Rcpt("buyer@refused.test"), 550, "5.1.0 Requested action not taken: mailbox unavailable")
	if err := c.Rcpt("buyer@allowed.test"); err != nil {
		t.Fatalf("RCPT of an allowed recipient: %v", err)
	}
	if err := sendVia(dialMailpit(t, m), "shop@sekali.test", "buyer@allowed.test", testMail(newMessageID(), "allowed")); err != nil {
		t.Fatal(err)
	}
	m.WaitForCount(t, 1, 5*time.Second)
}

func TestMailpitStopStart(t *testing.T) {
	t.Parallel()
	m := StartMailpit(t, MailpitOptions{})
	before := newMessageID()
	if err := sendVia(dialMailpit(t, m), "shop@sekali.test", "buyer@example.test", testMail(before, "before the outage")); err != nil {
		t.Fatal(err)
	}

	m.Stop(t)
	if _, err := smtp.Dial(m.SMTPAddr()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial a stopped Mailpit: %v, want connection refused", err)
	}

	m.Start(t)
	if n := m.CountByMessageID(t, before); n != 1 {
		t.Fatalf("after the restart CountByMessageID(%s) = %d, want 1", before, n)
	}
	if err := sendVia(dialMailpit(t, m), "shop@sekali.test", "buyer@example.test", testMail(newMessageID(), "after the outage")); err != nil {
		t.Fatalf("send after the restart: %v", err)
	}
	m.WaitForCount(t, 2, 5*time.Second)
}

func TestMailpitVersionCheckRefusesOtherBinaries(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkMailpitVersion(bin); err == nil || !strings.Contains(err.Error(), "is not Mailpit "+MailpitVersion) {
		t.Fatalf("checkMailpitVersion(%s) = %v", bin, err)
	}
}

func dialMailpit(t *testing.T, m *Mailpit) *smtp.Client {
	t.Helper()
	c, err := smtp.Dial(m.SMTPAddr())
	if err != nil {
		t.Fatalf("dial Mailpit: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sendVia sends one message on c and ends the session.
func sendVia(c *smtp.Client, from, to string, msg []byte) error {
	if err := c.Mail(from); err != nil {
		return err
	}
	if err := c.Rcpt(to); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(msg); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}

func newMessageID() string { return randomHex(12) + "@sekali.test" }

func testMail(messageID, subject string) []byte {
	return []byte("Message-ID: <" + messageID + ">\r\n" +
		"Date: " + time.Now().Format(time.RFC1123Z) + "\r\n" +
		"From: Sekali Shop <shop@sekali.test>\r\n" +
		"To: <buyer@example.test>\r\n" +
		"Subject: " + subject + "\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\n" +
		"\r\n" +
		"Grüße from the test.\r\n")
}

// wantReply checks that err is an SMTP reply with code whose text
// contains text.
func wantReply(t *testing.T, err error, code int, text string) {
	t.Helper()
	var reply *textproto.Error
	if !errors.As(err, &reply) {
		t.Fatalf("got %v, want SMTP reply %d %s", err, code, text)
	}
	if reply.Code != code || !strings.Contains(reply.Msg, text) {
		t.Fatalf("got reply %d %s, want %d %s", reply.Code, reply.Msg, code, text)
	}
}
