package notify

import (
	"errors"
	"fmt"
	"net/textproto"
	"testing"
)

// Only an answer about this recipient fails a delivery; whatever is about
// our session makes it wait.
func TestClassifySMTPByStageAndEnhancedCode(t *testing.T) {
	t.Parallel()
	const rcpt = "ana@example.com"
	for _, c := range []struct {
		stage Stage
		code  int
		msg   string
		want  Outcome
	}{
		// Our session: every delivery would get the same answer.
		{StageConnect, 0, "connection refused", OutcomeUnavailable},
		{StageConnect, 554, "5.3.2 not accepting connections", OutcomeUnavailable},
		{StageAuth, 535, "5.7.8 Authentication credentials invalid", OutcomeUnavailable},
		{StageAuth, 454, "4.7.0 temporary authentication failure", OutcomeUnavailable},
		{StageSender, 530, "5.7.0 Authentication required", OutcomeUnavailable},
		{StageSender, 550, "5.7.1 Sender address rejected: not owned by user", OutcomeUnavailable},
		{StageSender, 553, "5.1.8 sender domain does not exist", OutcomeUnavailable},
		{StageSender, 501, "5.5.4 Syntax error in parameters or arguments (invalid FROM parameter)", OutcomeUnavailable},
		{StageSender, 451, "4.7.1 throttled, slow down", OutcomeUnavailable},
		{StageRecipient, 421, "4.4.2 closing connection", OutcomeUnavailable},
		{StageRecipient, 501, "5.5.4 Syntax error (invalid TO parameter)", OutcomeUnavailable},
		{StageRecipient, 554, "5.7.1 Relay access denied", OutcomeUnavailable},
		{StageData, 421, "4.3.0 shutting down", OutcomeUnavailable},
		// This recipient, for now.
		{StageRecipient, 450, "4.2.0 <ana@example.com>: Recipient address rejected: Greylisted", OutcomeTemporary},
		{StageRecipient, 451, "4.7.1 Greylisting in action, please come back later", OutcomeTemporary},
		{StageRecipient, 452, "4.2.2 mailbox full", OutcomeTemporary},
		{StageRecipient, 552, "5.2.2 mailbox full", OutcomeTemporary}, // RFC 5321 §4.5.3.1.10
		{StageData, 451, "4.3.0 try again later", OutcomeTemporary},
		{StageData, 554, "5.7.1 message rejected by DMARC policy", OutcomeTemporary},
		{StageData, 554, "5.6.0 content rejected", OutcomeTemporary},
		// This recipient, for good.
		{StageRecipient, 550, "5.1.1 <ana@example.com>: Recipient address rejected: User unknown", OutcomePermanent},
		{StageRecipient, 550, "5.1.0 Requested action not taken: mailbox unavailable", OutcomePermanent},
		{StageRecipient, 550, "No such user here", OutcomePermanent},
		{StageData, 550, "5.1.1 user unknown", OutcomePermanent},
		{StageData, 550, "message to <ana@example.com> refused", OutcomePermanent},
	} {
		t.Run(fmt.Sprintf("%s %d %s", c.stage, c.code, c.msg), func(t *testing.T) {
			var err error = errors.New(c.msg)
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
