package resend

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// apiError is Resend's error answer (https://resend.com/docs/api-reference/errors).
type apiError struct {
	StatusCode int    `json:"statusCode"`
	Name       string `json:"name"`
	Message    string `json:"message"`
}

func decodeError(body []byte) apiError {
	var e apiError
	if json.Unmarshal(body, &e) != nil {
		e.Message = httpprovider.Truncate(body)
	}
	return e
}

// classify decides what an error answer means for the delivery. Only an
// answer about the recipient is permanent; an answer about our key, our
// account, our sender domain, our request's shape or Resend's health is
// Resend refusing us (mail.OutcomeUnavailable), so that one mistake in
// the set-up never fails deliveries. A 429 is Resend's pace, not a
// failure (mail.OutcomeThrottled): nothing was taken, and its headers
// (Refused puts them in SendError.Header) or, for a quota, Pause say how
// long to wait. Every 5xx is unavailable: Resend is unwell. After the
// request was written (every send's: Refused says so) it may have taken
// the message, so the delivery stays with Resend, whose refusal of a
// second message under the same key makes the retry safe
// (mail.SendError.MayHaveAccepted).
//
//	status  name                             outcome
//	401/403 missing_api_key, invalid_api_key, restricted_api_key, suspended_api_key,
//	        invalid_permission, validation_error (API key, own address only,
//	        domain not verified)             unavailable (auth, or sender for the domain)
//	429     rate_limit_exceeded              throttled (retry-after, ratelimit-*)
//	429     daily_quota_exceeded             throttled, Pause until the next UTC midnight
//	429     monthly_quota_exceeded           throttled, Pause QuotaPause (a plan's upgrade
//	                                         or its next month, which we cannot know)
//	5xx     application_error, service_unavailable, anything
//	                                         unavailable
//	404/405 not_found, method_not_allowed     unavailable (a wrong base URL)
//	400     invalid_idempotency_key          unavailable (our keys are 71 characters: a bug)
//	409     concurrent_idempotent_requests   key in flight: the first request under our key
//	                                         is still running, and may be taken; trying again
//	                                         later gets its answer
//	409     invalid_idempotent_request       key taken: Resend holds another body under our
//	                                         key (a batch's, or the delivery's: the template
//	                                         changed in between?), so it took that one
//	400/422 validation_error, invalid_to_address about `to`
//	                                         permanent (recipient)
//	400/422 … about `from`                   unavailable (sender)
//	400/422 anything else (missing_required_field, invalid_parameter, …)
//	                                         temporary: this message; retried until
//	                                         DELIVERY_MAX_AGE, an operator can retry after a fix
func classify(status int, e apiError) *mail.SendError {
	se := &mail.SendError{Reply: mail.HTTPStatus(status), Err: fmt.Errorf("resend answered %d %s: %s", status, e.Name, e.Message)}
	msg := strings.ToLower(e.Message)
	switch {
	case status == 401 || status == 403:
		se.Outcome, se.Stage = mail.OutcomeUnavailable, mail.StageAuth
		if e.Name == "validation_error" && !strings.Contains(msg, "api key") {
			se.Stage = mail.StageSender // testing-only address, domain not verified
		}
	case status == 429:
		se.Outcome, se.Stage, se.Pause = mail.OutcomeThrottled, mail.StageConnect, quotaPause(e.Name, time.Now())
		if se.Pause > 0 {
			se.Throttle = mail.ThrottleQuota
		}
	case status >= 500:
		se.Outcome, se.Stage = mail.OutcomeUnavailable, mail.StageConnect
	case status == 404 || status == 405:
		se.Outcome, se.Stage = mail.OutcomeUnavailable, mail.StageConnect
	case e.Name == "invalid_idempotency_key":
		se.Outcome, se.Stage = mail.OutcomeUnavailable, mail.StageConnect
	case e.Name == "concurrent_idempotent_requests":
		se.Outcome, se.Stage = mail.OutcomeKeyInFlight, mail.StageData
		se.Err = fmt.Errorf("%w (an earlier request under this idempotency key is in flight: Resend may have taken it)", se.Err)
	case e.Name == "invalid_idempotent_request":
		se.Outcome, se.Stage = mail.OutcomeKeyTaken, mail.StageData
		se.Err = fmt.Errorf("%w (Resend already took a request with another body under this idempotency key within %s: it sent that one)", se.Err, DedupWindow)
	case e.Name == "missing_required_field" || e.Name == "missing_required_parameter":
		se.Outcome, se.Stage = mail.OutcomeTemporary, mail.StageData // our request lacks a field: a bug, not the recipient
	case e.Name == "invalid_to_address" || httpprovider.MentionsField(msg, "to"):
		se.Outcome, se.Stage = mail.OutcomePermanent, mail.StageRecipient
	case httpprovider.MentionsField(msg, "from"):
		se.Outcome, se.Stage = mail.OutcomeUnavailable, mail.StageSender
	case strings.Contains(msg, "api key"):
		se.Outcome, se.Stage = mail.OutcomeUnavailable, mail.StageAuth
	default:
		se.Outcome, se.Stage = mail.OutcomeTemporary, mail.StageData
	}
	return se
}

// QuotaPause is the longest pause a quota refusal sets: a day. A daily
// quota's pause ends at the next UTC midnight, when a calendar day's
// count starts afresh (Resend's own words are "wait until 24 hours have
// passed"; a refusal then pauses again). A monthly quota says neither
// when the plan's month turns nor when it is upgraded: a day, and the
// budget's own cap (internal/pace asks again after an hour at most)
// finds out sooner.
const QuotaPause = 24 * time.Hour

// quotaPause is the pause a 429 named name sets at now: until the next
// UTC midnight for daily_quota_exceeded (a minute at least, against a
// clock a little ahead of Resend's), QuotaPause for
// monthly_quota_exceeded, none for a rate limit, whose headers say.
func quotaPause(name string, now time.Time) time.Duration {
	switch name {
	case "daily_quota_exceeded":
		midnight := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
		return min(max(midnight.Sub(now), time.Minute), QuotaPause)
	case "monthly_quota_exceeded":
		return QuotaPause
	}
	return 0
}
