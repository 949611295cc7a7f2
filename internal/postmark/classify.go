package postmark

import (
	"fmt"
	"strings"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// A paceAnswer is a row of paceAnswers: an answer of Postmark's about
// pace, as it documents it.
type paceAnswer struct {
	who       string // who documents it, and where
	status    int
	errorCode int    // its ErrorCode; 0: any
	message   string // an example of its Message
}

// paceAnswers are Postmark's refusals for pace: not taken, slow down
// (mail.OutcomeThrottled, no attempt counted, no breaker). Postmark says
// neither which limit nor for how long (no header, no time in the
// message). Each row is checked against postmarktest
// (TestEveryPaceAnswer).
var paceAnswers = []paceAnswer{
	{who: "Postmark API overview, response codes: 429, rate limit exceeded", status: 429,
		message: "Rate limit exceeded: you have made too many requests, slow down."},
	{who: "Postmark API overview, error codes: ErrorCode 429, Rate Limit Exceeded (in a 422)", status: 422, errorCode: 429,
		message: "Rate Limit Exceeded"},
}

// classify decides what an error answer means for the delivery
// (https://postmarkapp.com/developer/api/overview#error-codes). Only an
// answer about the recipient is permanent; our token, account, sender
// signature, stream or request shape is Postmark refusing us
// (mail.OutcomeUnavailable). Its rate limit (paceAnswers: a 429, or
// ErrorCode 429) is a pace, not a failure: throttled, nothing taken. Postmark does not deduplicate, so a 5xx
// after our request was written, 503 included, is ambiguous: Postmark's
// documentation says of a 500 that "in most cases" the message is lost,
// not in all, and the look-up can tell (the worker also stops sending
// until a probe passes). jsonBody says the answer was
// Postmark's JSON rather than, say, a firewall's HTML page.
//
//	HTTP   ErrorCode                                     outcome
//	401    10 bad or missing token                       unavailable (auth)
//	422    10                                            unavailable (auth)
//	422    100 maintenance                               unavailable
//	422    300 invalid email request about 'To'          permanent (recipient)
//	422    300 … about 'From'                            unavailable (sender)
//	422    300 anything else (no body, >50 recipients)   temporary
//	422    400, 401 sender signature not found / not confirmed, 412 account pending
//	                                                     unavailable (sender)
//	422    402 invalid JSON, 403 incompatible JSON, 409 JSON required, 410 too many
//	       batch messages                                unavailable (our request: every message would fail)
//	422    405 not allowed to send, 413 account may not send
//	                                                     unavailable (auth)
//	422    406 inactive recipient (suppressed: hard bounce, complaint, manual)
//	                                                     permanent (recipient)
//	422    411 forbidden attachment type                 temporary
//	422    429 rate limit (paceAnswers)                  throttled
//	422    other codes naming the message stream         unavailable (our set-up)
//	422    any other code                                temporary
//	429    (paceAnswers)                                 throttled
//	403 (not Postmark's JSON: a firewall), 404           unavailable
//	413    payload too large                             temporary
//	5xx                                                  ambiguous (look it up)
//	other 4xx                                            temporary
func classify(status, code int, message string, jsonBody bool) *mail.SendError {
	se := &mail.SendError{Reply: mail.HTTPStatus(status), Err: fmt.Errorf("postmark answered %d, ErrorCode %d: %s", status, code, message)}
	if !jsonBody {
		se.Err = fmt.Errorf("postmark answered %d without its JSON error", status)
	}
	set := func(o mail.Outcome, s mail.Stage) *mail.SendError {
		se.Outcome, se.Stage = o, s
		return se
	}
	for _, a := range paceAnswers {
		if status == a.status && (a.errorCode == 0 || code == a.errorCode) {
			return set(mail.OutcomeThrottled, mail.StageConnect)
		}
	}
	switch {
	case status == 401:
		return set(mail.OutcomeUnavailable, mail.StageAuth)
	case status >= 500:
		return set(mail.OutcomeAmbiguous, mail.StageData)
	case status == 403 || status == 404:
		return set(mail.OutcomeUnavailable, mail.StageConnect)
	case status == 413:
		return set(mail.OutcomeTemporary, mail.StageData)
	case code == 0:
		return set(mail.OutcomeTemporary, mail.StageData)
	}
	msg := strings.ToLower(message)
	switch code {
	case 10, 405, 413:
		return set(mail.OutcomeUnavailable, mail.StageAuth)
	case 100:
		return set(mail.OutcomeUnavailable, mail.StageConnect)
	case 300:
		switch {
		case httpprovider.MentionsField(msg, "to"):
			return set(mail.OutcomePermanent, mail.StageRecipient)
		case httpprovider.MentionsField(msg, "from"):
			return set(mail.OutcomeUnavailable, mail.StageSender)
		default:
			return set(mail.OutcomeTemporary, mail.StageData)
		}
	case 400, 401, 412:
		return set(mail.OutcomeUnavailable, mail.StageSender)
	case 402, 403, 409, 410:
		return set(mail.OutcomeUnavailable, mail.StageData)
	case 406:
		return set(mail.OutcomePermanent, mail.StageRecipient)
	case 411:
		return set(mail.OutcomeTemporary, mail.StageData)
	}
	if strings.Contains(msg, "stream") {
		return set(mail.OutcomeUnavailable, mail.StageSender)
	}
	return set(mail.OutcomeTemporary, mail.StageData)
}
