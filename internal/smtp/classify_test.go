package smtp

import (
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
)

// Only an answer about this recipient fails a delivery; whatever is about
// our session makes it wait.
func TestClassifySMTPByStageAndEnhancedCode(t *testing.T) {
	t.Parallel()
	const rcpt = "ana@example.com"
	for _, c := range []struct {
		stage mail.Stage
		code  int
		msg   string
		want  mail.Outcome
	}{
		// Our session: every delivery would get the same answer.
		{mail.StageConnect, 0, "connection refused", mail.OutcomeUnavailable},
		{mail.StageConnect, 554, "5.3.2 not accepting connections", mail.OutcomeUnavailable},
		{mail.StageAuth, 535, "5.7.8 Authentication credentials invalid", mail.OutcomeUnavailable},
		{mail.StageAuth, 454, "4.7.0 temporary authentication failure", mail.OutcomeUnavailable},
		{mail.StageSender, 530, "5.7.0 Authentication required", mail.OutcomeUnavailable},
		{mail.StageSender, 550, "5.7.1 Sender address rejected: not owned by user", mail.OutcomeUnavailable},
		{mail.StageSender, 553, "5.1.8 sender domain does not exist", mail.OutcomeUnavailable},
		{mail.StageSender, 501, "5.5.4 Syntax error in parameters or arguments (invalid FROM parameter)", mail.OutcomeUnavailable},
		{mail.StageRecipient, 421, "4.4.2 closing connection", mail.OutcomeUnavailable},
		{mail.StageRecipient, 501, "5.5.4 Syntax error (invalid TO parameter)", mail.OutcomeUnavailable},
		{mail.StageRecipient, 554, "5.7.1 Relay access denied", mail.OutcomeUnavailable},
		{mail.StageData, 421, "4.3.0 shutting down", mail.OutcomeUnavailable},
		{mail.StageConnect, 421, "4.4.2 closing connection", mail.OutcomeUnavailable},
		{mail.StageSender, 421, "4.4.2 relay.example Error: timeout exceeded", mail.OutcomeUnavailable},
		// A policy or our errors, in a 4.7.x: not a pace.
		{mail.StageSender, 421, "4.7.0 relay.example Error: too many errors", mail.OutcomeUnavailable},
		{mail.StageRecipient, 421, "4.7.0 TLS required for RCPT domain, closing connection.", mail.OutcomeUnavailable},
		{mail.StageSender, 450, "4.7.1 Client host rejected: cannot find your hostname, [192.0.2.1]", mail.OutcomeUnavailable},
		{mail.StageSender, 451, "4.7.1 Service unavailable - try again later", mail.OutcomeUnavailable},
		{mail.StageSender, 550, "5.7.1 rate limit exceeded, go away", mail.OutcomeUnavailable},
		// The relay's pace, anywhere: nothing was taken.
		{mail.StageSender, 451, "4.7.1 throttled, slow down", mail.OutcomeThrottled},
		{mail.StageSender, 421, "4.7.0 Rate limit exceeded, try again later", mail.OutcomeThrottled},
		{mail.StageSender, 421, "4.7.0 Try again later, closing connection.", mail.OutcomeThrottled},
		{mail.StageConnect, 421, "4.7.0 Try again later, closing connection. (EHLO)", mail.OutcomeThrottled},
		{mail.StageConnect, 421, "4.7.0 relay.example Error: too many connections from 127.0.0.1", mail.OutcomeThrottled},
		{mail.StageSender, 450, "4.7.1 Error: too much mail from 127.0.0.1", mail.OutcomeThrottled},
		{mail.StageRecipient, 451, "4.7.1 Error: too many recipients from 192.0.2.1", mail.OutcomeThrottled},
		{mail.StageData, 454, "Throttling failure: Maximum sending rate exceeded.", mail.OutcomeThrottled},
		{mail.StageSender, 454, "Throttling failure: Daily message quota exceeded.", mail.OutcomeThrottled},
		{mail.StageAuth, 454, "4.7.0 Too many authentication attempts, slow down", mail.OutcomeThrottled},
		{mail.StageData, 554, "5.2.0 STOREDRV.Submission.Exception:SubmissionQuotaExceededException; Failed to process message", mail.OutcomeThrottled},
		// This recipient, for now.
		{mail.StageRecipient, 450, "4.2.0 <ana@example.com>: Recipient address rejected: Greylisted", mail.OutcomeTemporary},
		{mail.StageRecipient, 450, "4.7.1 Client host rejected: cannot find your hostname, [192.0.2.1]", mail.OutcomeTemporary},
		{mail.StageRecipient, 450, "4.2.1 The user you are trying to contact is receiving mail at a rate that prevents additional messages from being delivered.", mail.OutcomeTemporary},
		{mail.StageRecipient, 452, "4.5.3 Error: too many recipients", mail.OutcomeTemporary},
		{mail.StageRecipient, 451, "4.7.1 Greylisting in action, please come back later", mail.OutcomeTemporary},
		{mail.StageRecipient, 452, "4.2.2 mailbox full", mail.OutcomeTemporary},
		{mail.StageRecipient, 552, "5.2.2 mailbox full", mail.OutcomeTemporary}, // RFC 5321 §4.5.3.1.10
		{mail.StageData, 451, "4.3.0 try again later", mail.OutcomeTemporary},
		{mail.StageData, 554, "5.7.1 message rejected by DMARC policy", mail.OutcomeTemporary},
		{mail.StageData, 554, "5.6.0 content rejected", mail.OutcomeTemporary},
		// This recipient, for good.
		{mail.StageRecipient, 550, "5.1.1 <ana@example.com>: Recipient address rejected: User unknown", mail.OutcomePermanent},
		{mail.StageRecipient, 550, "5.1.0 Requested action not taken: mailbox unavailable", mail.OutcomePermanent},
		{mail.StageRecipient, 550, "No such user here", mail.OutcomePermanent},
		{mail.StageData, 550, "5.1.1 user unknown", mail.OutcomePermanent},
		{mail.StageData, 550, "message to <ana@example.com> refused", mail.OutcomePermanent},
	} {
		t.Run(fmt.Sprintf("%s %d %s", c.stage, c.code, c.msg), func(t *testing.T) {
			err := errors.New(c.msg)
			if c.code != 0 {
				err = &textproto.Error{Code: c.code, Msg: c.msg}
			}
			se := smtpError(c.stage, err, rcpt)
			if se.Outcome != c.want {
				t.Errorf("outcome %s, want %s (enhanced %q)", se.Outcome, c.want, se.Reply.Enhanced)
			}
			// The reply's text, without its enhanced code, for the budget
			// (internal/pace reads it).
			if want := strings.TrimSpace(strings.TrimPrefix(c.msg, se.Reply.Enhanced)); c.code != 0 && se.Reply.Text != want {
				t.Errorf("reply text %q, want %q", se.Reply.Text, want)
			}
		})
	}
}

// Each row of the table of relays' replies decides its own example: a
// pace of the limit it names, or not a pace; no row before it takes it.
func TestEveryPaceReplyRow(t *testing.T) {
	t.Parallel()
	for i, row := range paceReplies {
		t.Run(row.example, func(t *testing.T) {
			codeText, msg, _ := strings.Cut(row.example, " ")
			code, err := strconv.Atoi(codeText)
			if err != nil {
				t.Fatalf("example %q does not start with a reply code", row.example)
			}
			se := smtpError(row.stage, &textproto.Error{Code: code, Msg: msg}, "ana@example.com")
			if got, _, _ := paceOf(se.Reply, time.Now()); got != i {
				t.Errorf("decided by row %d, want its own row %d (%s)", got, i, row.who)
			}
			if (se.Outcome == mail.OutcomeThrottled) != row.pace || se.Throttle != row.throttle {
				t.Errorf("outcome %s, throttle %q; want a pace %v of %q (%s)", se.Outcome, se.Throttle, row.pace, row.throttle, row.who)
			}
			if row.quota && se.Pause < QuotaPause {
				t.Errorf("a daily quota pauses %s, want at least %s", se.Pause, QuotaPause)
			}
		})
	}
}

// What a reply says of how long: a date (Mailgun's), a number of
// seconds, a quota's hour.
func TestPaceNamedInTheReply(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 10, 5, 19, 20, 44, 0, time.UTC)
	for _, c := range []struct {
		code int
		msg  string
		want time.Duration
	}{
		{421, "Domain mg.example.com is not allowed to send: recipient limit exceeded, try again after Sun, 05 Oct 2025 19:22:44 UTC", 2 * time.Minute},
		{421, "Domain mg.example.com is not allowed to send: recipient limit exceeded, try again after Sun, 05 Oct 2025 19:00:00 UTC", 0},
		{421, "Domain mg.example.com is not allowed to send: recipient limit exceeded, try again after soon", 0},
		{451, "4.7.1 Too many messages, rate limit exceeded. Try again in 92 seconds", 92 * time.Second},
		{451, "4.7.1 Rate limit exceeded, try again in 2 minutes", 2 * time.Minute},
		{454, "Throttling failure: Daily message quota exceeded.", QuotaPause},
		{450, "4.7.1 Error: too much mail from 127.0.0.1", 0},
	} {
		r := mail.SMTPReply(c.code, enhancedCode(c.code, c.msg))
		r.Text = strings.TrimSpace(strings.TrimPrefix(c.msg, r.Enhanced))
		if _, pause, ok := paceOf(r, now); !ok || pause != c.want {
			t.Errorf("%d %s: pace %v, pause %s; want a pace of %s", c.code, c.msg, ok, pause, c.want)
		}
	}
}

func TestEnhancedCodeMustAgreeWithTheReply(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code int
		msg  string
		want string
	}{
		{550, "5.1.1 user unknown", "5.1.1"},
		{451, "4.7.1 greylisted", "4.7.1"},
		{550, "4.1.1 disagrees with its reply", ""},
		{550, "user unknown", ""},
		{550, "5.1 too short", ""},
		{550, "5.1.1000 too long", ""},
	} {
		if got := enhancedCode(c.code, c.msg); got != c.want {
			t.Errorf("enhancedCode(%d, %q) = %q, want %q", c.code, c.msg, got, c.want)
		}
	}
}

func TestHeloName(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{
		"worker-1": true, "mx.shop.example": true, "[192.0.2.1]": true, "[IPv6:2001:db8::1]": true,
		"": false, "shop example": false, "-bad.example": false, "[not-an-ip]": false, "a\r\nMAIL FROM:<x@y>": false,
	} {
		if validHeloName(name) != ok {
			t.Errorf("validHeloName(%q) = %v, want %v", name, !ok, ok)
		}
	}
	if !validHeloName(HeloName()) {
		t.Errorf("default HeloName %q is not valid", HeloName())
	}
}
