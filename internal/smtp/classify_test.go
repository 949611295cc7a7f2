package smtp

import (
	"errors"
	"fmt"
	"net/textproto"
	"testing"

	"github.com/sekali-dev/sekali/internal/notify"
)

// Only an answer about this recipient fails a delivery; whatever is about
// our session makes it wait.
func TestClassifySMTPByStageAndEnhancedCode(t *testing.T) {
	t.Parallel()
	const rcpt = "ana@example.com"
	for _, c := range []struct {
		stage notify.Stage
		code  int
		msg   string
		want  notify.Outcome
	}{
		// Our session: every delivery would get the same answer.
		{notify.StageConnect, 0, "connection refused", notify.OutcomeUnavailable},
		{notify.StageConnect, 554, "5.3.2 not accepting connections", notify.OutcomeUnavailable},
		{notify.StageAuth, 535, "5.7.8 Authentication credentials invalid", notify.OutcomeUnavailable},
		{notify.StageAuth, 454, "4.7.0 temporary authentication failure", notify.OutcomeUnavailable},
		{notify.StageSender, 530, "5.7.0 Authentication required", notify.OutcomeUnavailable},
		{notify.StageSender, 550, "5.7.1 Sender address rejected: not owned by user", notify.OutcomeUnavailable},
		{notify.StageSender, 553, "5.1.8 sender domain does not exist", notify.OutcomeUnavailable},
		{notify.StageSender, 501, "5.5.4 Syntax error in parameters or arguments (invalid FROM parameter)", notify.OutcomeUnavailable},
		{notify.StageSender, 451, "4.7.1 throttled, slow down", notify.OutcomeUnavailable},
		{notify.StageRecipient, 421, "4.4.2 closing connection", notify.OutcomeUnavailable},
		{notify.StageRecipient, 501, "5.5.4 Syntax error (invalid TO parameter)", notify.OutcomeUnavailable},
		{notify.StageRecipient, 554, "5.7.1 Relay access denied", notify.OutcomeUnavailable},
		{notify.StageData, 421, "4.3.0 shutting down", notify.OutcomeUnavailable},
		// This recipient, for now.
		{notify.StageRecipient, 450, "4.2.0 <ana@example.com>: Recipient address rejected: Greylisted", notify.OutcomeTemporary},
		{notify.StageRecipient, 451, "4.7.1 Greylisting in action, please come back later", notify.OutcomeTemporary},
		{notify.StageRecipient, 452, "4.2.2 mailbox full", notify.OutcomeTemporary},
		{notify.StageRecipient, 552, "5.2.2 mailbox full", notify.OutcomeTemporary}, // RFC 5321 §4.5.3.1.10
		{notify.StageData, 451, "4.3.0 try again later", notify.OutcomeTemporary},
		{notify.StageData, 554, "5.7.1 message rejected by DMARC policy", notify.OutcomeTemporary},
		{notify.StageData, 554, "5.6.0 content rejected", notify.OutcomeTemporary},
		// This recipient, for good.
		{notify.StageRecipient, 550, "5.1.1 <ana@example.com>: Recipient address rejected: User unknown", notify.OutcomePermanent},
		{notify.StageRecipient, 550, "5.1.0 Requested action not taken: mailbox unavailable", notify.OutcomePermanent},
		{notify.StageRecipient, 550, "No such user here", notify.OutcomePermanent},
		{notify.StageData, 550, "5.1.1 user unknown", notify.OutcomePermanent},
		{notify.StageData, 550, "message to <ana@example.com> refused", notify.OutcomePermanent},
	} {
		t.Run(fmt.Sprintf("%s %d %s", c.stage, c.code, c.msg), func(t *testing.T) {
			err := errors.New(c.msg)
			if c.code != 0 {
				err = &textproto.Error{Code: c.code, Msg: c.msg}
			}
			se := smtpError(c.stage, err, rcpt)
			if se.Outcome != c.want {
				t.Errorf("outcome %s, want %s (enhanced %q)", se.Outcome, c.want, se.Enhanced)
			}
		})
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
