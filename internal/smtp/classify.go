package smtp

import (
	"errors"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
)

// QuotaPause is the pause of a relay's refusal for a daily quota, which
// says no time (SES's, Google's, Microsoft 365's): an hour, what
// internal/pace cuts any pause to; then one message asks again.
const QuotaPause = time.Hour

// A paceReply is a row of paceReplies: a reply relays document, and
// whether it is a pace ("not taken, slow down": mail.OutcomeThrottled,
// at any stage, no attempt counted, no breaker) and of which limit.
type paceReply struct {
	who     string     // who documents it, and where
	example string     // the reply as documented, one line: code, enhanced code, text
	stage   mail.Stage // where in the session the relay gives it
	codes   []int      // the reply codes it is; none: any
	// enhanced is its enhanced code: "" any, "4.7.500-699" a range of
	// details, else exactly this one.
	enhanced string
	words    []string // any of these in its text, in lower case; none: any text
	pace     bool     // false: not a pace, however it reads (the rows that must win over a pace row's words)
	throttle mail.Throttle
	quota    bool // a daily quota: a pause of QuotaPause at least
}

// paceReplies tells a relay's refusal for pace from its other refusals,
// by code, enhanced code and text, as each relay documents them; the
// first row that matches decides. RFC 3463's x.7.x is "security or
// policy", not rate: a 4.7.x without words about rate (Google's "421
// 4.7.0 TLS required", Postfix's "450 4.7.1 … cannot find your
// hostname") is not a pace. A reply no row names keeps the stage's
// handling (classifySMTP). A pace row takes only 4xx replies, save a
// daily quota's, which some relays answer 5xx though room comes back.
//
// TestEveryPaceReplyRow checks each row's example against the table.
var paceReplies = []paceReply{
	// Not a pace, whatever words they share with one.
	{who: "greylisting (RFC 6647; Postfix's postgrey, rspamd): about this recipient, for now",
		example: "451 4.7.1 <ana@example.com>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/help/example.com.html",
		stage:   mail.StageRecipient, words: []string{"greylist", "graylist"}},
	{who: "Postfix smtpd(8), smtpd_hard_error_limit: our session's errors",
		example: "421 4.7.0 relay.example Error: too many errors", stage: mail.StageSender, codes: []int{421}, words: []string{"too many errors"}},
	{who: "Postfix smtpd(8), smtpd_recipient_limit: recipients of one message (RFC 5321 §4.5.3.1.10)",
		example: "452 4.5.3 Error: too many recipients", stage: mail.StageRecipient, codes: []int{452}, enhanced: "4.5.3", words: []string{"too many recipients"}},
	{who: "Postfix postconf(5), reject_unknown_client_hostname with unknown_client_reject_code 450: a policy",
		example: "450 4.7.1 Client host rejected: cannot find your hostname, [192.0.2.1]", stage: mail.StageRecipient, words: []string{"cannot find your"}},
	{who: "Google Workspace, Gmail SMTP errors and codes: a policy of the recipient's domain",
		example: "421 4.7.0 TLS required for RCPT domain, closing connection.", stage: mail.StageRecipient, codes: []int{421}, words: []string{"tls required"}},
	{who: "Google Workspace, Gmail SMTP errors and codes: a policy of the recipient's domain",
		example: "421 4.7.0 IP not in whitelist for RCPT domain, closing connection.", stage: mail.StageRecipient, codes: []int{421}, words: []string{"not in whitelist"}},
	{who: "Google Workspace, Gmail SMTP errors and codes: the recipient receives too fast, not we send too fast",
		example: "450 4.2.1 The user you are trying to contact is receiving mail at a rate that prevents additional messages from being delivered.",
		stage:   mail.StageRecipient, codes: []int{450}, enhanced: "4.2.1", words: []string{"is receiving mail", "is receiving email"}},
	{who: "Google Workspace, Gmail SMTP errors and codes: a mailbox full (RFC 3463 x.2.2)",
		example: "452 4.2.2 The email account that you tried to reach is over quota.", stage: mail.StageRecipient, enhanced: "4.2.2"},
	{who: "RFC 4954 §6: a temporary failure of AUTH",
		example: "454 4.7.0 Temporary authentication failure", stage: mail.StageAuth, codes: []int{454}, words: []string{"authentication failure"}},
	{who: "Microsoft 365, continuous error throttling for SMTP AUTH: a block for our own errors (a full mailbox, Send As denied), not for pace",
		example: "550 5.2.254 Sender throttled due to continuous too many recipients errors.", stage: mail.StageData, enhanced: "5.2.251-255"},

	// Postfix: smtpd(8) over anvil(8)'s limits (postconf(5)).
	{who: "Postfix, smtpd_client_connection_count_limit and smtpd_client_connection_rate_limit (one reply for both)",
		example: "421 4.7.0 relay.example Error: too many connections from 192.0.2.1", stage: mail.StageConnect,
		codes: []int{421}, words: []string{"too many connections"}, pace: true, throttle: mail.ThrottleConnections},
	{who: "Postfix, smtpd_client_new_tls_session_rate_limit",
		example: "421 4.7.0 relay.example Error: too many new TLS sessions from 192.0.2.1", stage: mail.StageConnect,
		codes: []int{421}, words: []string{"too many new tls sessions"}, pace: true, throttle: mail.ThrottleConnections},
	{who: "Postfix, smtpd_client_auth_rate_limit: one AUTH a connection",
		example: "450 4.7.1 Error: too many AUTH commands from 192.0.2.1", stage: mail.StageAuth,
		codes: []int{450}, words: []string{"too many auth commands"}, pace: true, throttle: mail.ThrottleConnections},
	{who: "Postfix, smtpd_client_message_rate_limit",
		example: "450 4.7.1 Error: too much mail from 192.0.2.1", stage: mail.StageSender,
		codes: []int{450}, words: []string{"too much mail"}, pace: true, throttle: mail.ThrottleMessages},
	{who: "Postfix, smtpd_client_recipient_rate_limit: one recipient a message here",
		example: "450 4.7.1 Error: too many recipients from 192.0.2.1", stage: mail.StageRecipient,
		codes: []int{450, 451}, words: []string{"too many recipients from"}, pace: true, throttle: mail.ThrottleMessages},

	// Amazon SES's SMTP interface (Developer Guide, errors related to the
	// sending quotas; after DATA).
	{who: "Amazon SES SMTP, the daily sending quota",
		example: "454 Throttling failure: Daily message quota exceeded.", stage: mail.StageData,
		codes: []int{454}, words: []string{"daily message quota"}, pace: true, throttle: mail.ThrottleQuota, quota: true},
	{who: "Amazon SES SMTP, the maximum send rate",
		example: "454 Throttling failure: Maximum sending rate exceeded.", stage: mail.StageData,
		codes: []int{454}, words: []string{"maximum sending rate"}, pace: true, throttle: mail.ThrottleMessages},

	// Microsoft 365 and Exchange.
	{who: "Microsoft 365 SMTP AUTH submission (smtp.office365.com): three connections at once a mailbox",
		example: "432 4.3.2 Concurrent connections limit exceeded.", stage: mail.StageConnect,
		codes: []int{421, 432, 451}, words: []string{"concurrent connections limit", "concurrent connection limit", "sender thread limit"}, pace: true, throttle: mail.ThrottleConnections},
	{who: "Exchange (Online and Server), a receive connector's connections at once",
		example: "421 4.3.2 The maximum number of concurrent server connections has exceeded a limit, closing transmission channel", stage: mail.StageConnect,
		codes: []int{421}, words: []string{"maximum number of concurrent"}, pace: true, throttle: mail.ThrottleConnections},
	{who: "Exchange, a connector's or throttling policy's MessageRateLimit (Microsoft 365 SMTP AUTH: 30 a minute)",
		example: "421 4.4.2 Message submission rate for this client has exceeded the configured limit", stage: mail.StageSender,
		codes: []int{421, 450, 451}, words: []string{"submission rate"}, pace: true, throttle: mail.ThrottleMessages},
	{who: "Microsoft 365 SMTP AUTH submission, 10,000 recipients a day",
		example: "554 5.2.0 STOREDRV.Submission.Exception:SubmissionQuotaExceededException; Failed to process message due to a permanent exception with message Cannot submit message.",
		stage:   mail.StageData, codes: []int{450, 451, 452, 550, 554}, words: []string{"submissionquotaexceeded"}, pace: true, throttle: mail.ThrottleQuota, quota: true},
	{who: "Exchange Online, 451 4.7.500-699 (ASxxx): throttling of a sending IP",
		example: "451 4.7.500 Server busy. Please try again later from [192.0.2.1]. (S77719)", stage: mail.StageData,
		codes: []int{451}, enhanced: "4.7.500-699", pace: true},

	// Google Workspace: Gmail SMTP errors and codes, SMTP relay service
	// error messages.
	{who: "Google Workspace, a daily sending or SMTP relay limit",
		example: "550 5.4.5 Daily user sending limit exceeded.", stage: mail.StageSender,
		codes: []int{421, 450, 451, 452, 550}, words: []string{"daily user sending", "daily sending quota", "daily smtp relay"}, pace: true, throttle: mail.ThrottleQuota, quota: true},
	{who: "Google Workspace SMTP relay, its peak limit",
		example: "450 4.2.1 Peak SMTP relay limit exceeded for customer. This is a temporary error.", stage: mail.StageSender,
		codes: []int{450}, words: []string{"peak smtp relay limit"}, pace: true, throttle: mail.ThrottleMessages},
	{who: "Google Workspace SMTP relay, at HELO: too many connections from us",
		example: "421 4.7.0 Try again later, closing connection. (EHLO)", stage: mail.StageConnect,
		codes: []int{421}, words: []string{"try again later, closing connection"}, pace: true, throttle: mail.ThrottleConnections},
	{who: "Google Workspace, mail from our address at an unusual rate",
		example: "421 4.7.28 Our system has detected an unusual rate of unsolicited mail originating from your IP address.", stage: mail.StageData,
		codes: []int{421, 450, 451}, words: []string{"unusual rate"}, pace: true, throttle: mail.ThrottleMessages},
	{who: "Google Workspace, server busy",
		example: "421 4.4.5 Server busy, try again later.", stage: mail.StageConnect,
		codes: []int{421}, words: []string{"server busy"}, pace: true},

	// Mailgun's SMTP endpoint (mailgun/mailgun-java#50: the API's 420 with
	// the same words).
	{who: "Mailgun, a domain's recipient limit (new and warming domains)",
		example: "421 Domain mg.example.com is not allowed to send: recipient limit exceeded, try again after Sun, 05 Oct 2025 19:22:44 UTC",
		stage:   mail.StageSender, codes: []int{421, 450, 451}, words: []string{"recipient limit exceeded"}, pace: true, throttle: mail.ThrottleMessages},

	// Any relay: the words relays use for rate (RFC 5321 leaves the text
	// free).
	{who: "any relay: connections, in the words relays use",
		example: "421 Too many concurrent SMTP connections from this IP address; please try again later.", stage: mail.StageConnect,
		codes: []int{421, 450, 451, 452, 454}, words: []string{"too many concurrent", "too many connections", "too many sessions", "too many simultaneous"}, pace: true, throttle: mail.ThrottleConnections},
	{who: "any relay: rate, in the words relays use",
		example: "451 4.7.1 Rate limit exceeded, try again later", stage: mail.StageSender,
		codes: []int{421, 450, 451, 452, 454}, words: []string{"rate limit", "ratelimit", "rate-limit", "rate exceeded", "sending rate", "message rate",
			"throttl", "slow down", "too many messages", "per second", "per minute", "per hour"}, pace: true},
}

// paceOf finds the row of paceReplies that r is, and what it says of
// the pace: the pause its text names (a date, a number of seconds), at
// least QuotaPause for a daily quota. ok is false when r is not a pace.
func paceOf(r mail.Reply, now time.Time) (row int, pause time.Duration, ok bool) {
	text := strings.ToLower(r.Text)
	for i, p := range paceReplies {
		if !p.matches(r, text) {
			continue
		}
		if !p.pace || (r.Code >= 500 && !p.quota) {
			return i, 0, false
		}
		pause = mail.PauseNamed(r.Text, now)
		if p.quota {
			pause = max(pause, QuotaPause)
		}
		return i, pause, true
	}
	return -1, 0, false
}

func (p paceReply) matches(r mail.Reply, text string) bool {
	if r.Code < 400 || len(p.codes) > 0 && !containsInt(p.codes, r.Code) || !enhancedIs(p.enhanced, r.Enhanced) {
		return false
	}
	if len(p.words) == 0 {
		return true
	}
	for _, w := range p.words {
		if strings.Contains(text, w) {
			return true
		}
	}
	return false
}

func containsInt(s []int, n int) bool {
	for _, v := range s {
		if v == n {
			return true
		}
	}
	return false
}

// enhancedIs reports whether an enhanced code is pattern: "" is any,
// "4.7.500-699" a range of details of 4.7, else the code itself.
func enhancedIs(pattern, code string) bool {
	if pattern == "" {
		return true
	}
	base, rng, ok := strings.Cut(pattern, "-")
	if !ok {
		return code == pattern
	}
	i := strings.LastIndex(base, ".")
	lo, _ := strconv.Atoi(base[i+1:])
	hi, _ := strconv.Atoi(rng)
	if !strings.HasPrefix(code, base[:i+1]) {
		return false
	}
	d, err := strconv.Atoi(code[i+1:])
	return err == nil && d >= lo && d <= hi
}

// smtpError classifies err, met at stage, as a *mail.SendError: a pace
// by paceReplies, else by classifySMTP.
func smtpError(stage mail.Stage, err error, recipient string) *mail.SendError {
	se := &mail.SendError{Stage: stage, Err: err}
	var perr *textproto.Error
	if errors.As(err, &perr) {
		se.Reply = mail.SMTPReply(perr.Code, enhancedCode(perr.Code, perr.Msg))
		se.Reply.Text = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(perr.Msg), se.Reply.Enhanced))
	}
	if i, pause, ok := paceOf(se.Reply, time.Now()); ok {
		se.Outcome, se.Pause, se.Throttle = mail.OutcomeThrottled, pause, paceReplies[i].throttle
		return se
	}
	se.Outcome = classifySMTP(stage, se.Reply, err, recipient)
	return se
}

// enhancedCode returns the RFC 3463 code at the start of a reply's text
// ("5.1.1 <x>: Recipient address rejected" -> "5.1.1"), if its class
// agrees with the reply code.
func enhancedCode(code int, msg string) string {
	f, _, _ := strings.Cut(strings.TrimSpace(msg), " ")
	parts := strings.Split(f, ".")
	if len(parts) != 3 || parts[0] != strconv.Itoa(code/100) {
		return ""
	}
	for _, p := range parts[1:] {
		if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 999 || len(p) > 3 {
			return ""
		}
	}
	return f
}

// classifySMTP decides what a refusal that is not a pace (paceReplies)
// means for the delivery, by the stage it came at. Only an answer about
// this recipient is permanent; everything about our session is the
// provider refusing us (mail.OutcomeUnavailable), so that one
// configuration mistake or a bad minute at the relay never fails a
// delivery. r is the zero Reply when no reply came (a network error).
//
//	stage                 4xx                     5xx
//	connect, auth, MAIL   unavailable             unavailable
//	RCPT                  temporary (greylisting) permanent; 552 temporary (RFC 5321 §4.5.3.1.10);
//	                                              x.3.x, x.5.x, x.7.x unavailable (the system, our syntax, our policy)
//	DATA and after        temporary               permanent when it names the mailbox (x.1.x, x.2.x,
//	                                              or the address in the text); else temporary
//	any 421 that is not a pace, and no reply before the data: unavailable.
func classifySMTP(stage mail.Stage, r mail.Reply, err error, recipient string) mail.Outcome {
	code := r.Code
	subject := ""
	if parts := strings.Split(r.Enhanced, "."); len(parts) == 3 {
		subject = parts[1]
	}
	switch {
	case code == 0 || code == 421:
		return mail.OutcomeUnavailable
	case stage == mail.StageConnect || stage == mail.StageAuth || stage == mail.StageSender:
		return mail.OutcomeUnavailable
	case code < 500:
		return mail.OutcomeTemporary
	case stage == mail.StageRecipient:
		switch {
		case code == 552:
			return mail.OutcomeTemporary
		case subject == "3" || subject == "5" || subject == "7":
			return mail.OutcomeUnavailable
		default:
			return mail.OutcomePermanent
		}
	default: // mail.StageData: 5xx to DATA or to the message
		if subject == "1" || subject == "2" ||
			(recipient != "" && strings.Contains(strings.ToLower(err.Error()), strings.ToLower(recipient))) {
			return mail.OutcomePermanent
		}
		return mail.OutcomeTemporary
	}
}
