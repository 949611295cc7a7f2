package worker

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/pace"
)

// want is what a step must say; a field left empty must be empty.
type want struct {
	write      write
	to         notify.Status
	refund     bool
	pin        bool
	result     result
	outcome    string
	retry      string
	duplicate  string
	handedBack string
	answer     answer
	skip       bool // the error tells asynq never to retry
}

func (w want) check(t *testing.T, name string, s step) {
	t.Helper()
	got := want{write: s.write, to: s.to, refund: s.refund, pin: s.pin, result: s.result, outcome: s.outcome, retry: s.retry,
		duplicate: s.duplicate, handedBack: s.handedBack, answer: s.answer, skip: errors.Is(s.err, asynq.SkipRetry)}
	if got != w {
		t.Errorf("%s:\n got %+v\nwant %+v", name, got, w)
	}
	if (s.answer == answerDone) != (s.err == nil) {
		t.Errorf("%s: answer %d with error %v: an error goes to asynq exactly when the task is not done", name, s.answer, s.err)
	}
}

// Every way a send can end, decided from a table: what is written, what
// is counted and what asynq is told. No database, no provider.
func TestDecideOutcome(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	young := notify.Delivery{Template: "order-confirmation", TryingSince: now.Add(-time.Minute)}
	old := notify.Delivery{Template: "order-confirmation", TryingSince: now.Add(-49 * time.Hour)}
	unknownSince := now.Add(-time.Hour)
	inDoubt := young
	inDoubt.Provider, inDoubt.ProviderPinned, inDoubt.UnsettledSince = "resend", true, &unknownSince
	oldInDoubt := inDoubt
	oldInDoubt.TryingSince = old.TryingSince
	smtpErr := func(o mail.Outcome, stage mail.Stage, code int, enhanced string) error {
		return &mail.SendError{Outcome: o, Stage: stage, Reply: mail.SMTPReply(code, enhanced), Err: fmt.Errorf("%d", code)}
	}
	for _, tt := range []struct {
		name string
		d    notify.Delivery
		err  error
		want want
	}{
		{"accepted", young, nil, want{write: writeSent, to: notify.StatusSent, result: resultSent, outcome: "sent"}},
		{"unrenderable", young, &renderError{err: errors.New("missing field")},
			want{write: writeHeld, to: notify.StatusHeld, result: resultHeld, outcome: "held", answer: answerSkip, skip: true}},
		{"lease lost before the data", young, &mail.SendError{Outcome: mail.OutcomeAborted, Stage: mail.StageData, Err: notify.ErrLeaseLost},
			want{write: writeDuplicate, result: resultFencedOut, duplicate: "fencing"}},
		{"lock lost before the data", young, &mail.SendError{Outcome: mail.OutcomeAborted, Stage: mail.StageData, Err: errLockLost},
			want{write: writeRetry, to: notify.StatusPending, refund: true, result: resultRetried, outcome: "retried", retry: "lock_expired", answer: answerRetry}},
		{"provider refuses us", young, smtpErr(mail.OutcomeUnavailable, mail.StageAuth, 535, "5.7.8"),
			want{write: writeRetry, to: notify.StatusPending, refund: true, result: resultRetried, outcome: "retried", retry: "provider_unavailable", answer: answerProviderWait}},
		{"Resend's 503 after the request went out", young, &mail.SendError{Outcome: mail.OutcomeUnavailable, Stage: mail.StageData,
			Reply: mail.HTTPStatus(503), HandedOver: true, Err: errors.New("503")},
			want{write: writeRetry, to: notify.StatusPending, refund: true, pin: true, result: resultRetried, outcome: "retried", retry: "provider_unavailable", answer: answerProviderWait}},
		{"HTTP provider unreachable after the hand-over", young, &mail.SendError{Outcome: mail.OutcomeUnavailable, Stage: mail.StageConnect,
			HandedOver: true, Err: errors.New("request not sent: connection refused")},
			want{write: writeRetry, to: notify.StatusPending, refund: true, result: resultRetried, outcome: "retried", retry: "provider_unavailable", answer: answerProviderWait}},
		{"SMTP refuses the data, 421", young, &mail.SendError{Outcome: mail.OutcomeUnavailable, Stage: mail.StageData,
			Reply: mail.SMTPReply(421, "4.3.2"), HandedOver: true, Err: errors.New("421")},
			want{write: writeRetry, to: notify.StatusPending, refund: true, result: resultRetried, outcome: "retried", retry: "provider_unavailable", answer: answerProviderWait}},
		{"greylisted at RCPT", young, smtpErr(mail.OutcomeTemporary, mail.StageRecipient, 451, "4.7.1"),
			want{write: writeRetry, to: notify.StatusPending, refund: true, result: resultRetried, outcome: "retried", retry: "smtp_4xx", answer: answerRetry}},
		{"deferred after the data", young, smtpErr(mail.OutcomeTemporary, mail.StageData, 452, ""),
			want{write: writeRetry, to: notify.StatusPending, result: resultRetried, outcome: "retried", retry: "smtp_4xx", answer: answerRetry}},
		{"HTTP 503", young, &mail.SendError{Outcome: mail.OutcomeTemporary, Stage: mail.StageData, Reply: mail.HTTPStatus(503), Err: errors.New("503")},
			want{write: writeRetry, to: notify.StatusPending, result: resultRetried, outcome: "retried", retry: "http_5xx", answer: answerRetry}},
		{"deferred past the max age", old, smtpErr(mail.OutcomeTemporary, mail.StageData, 452, ""),
			want{write: writeFailed, to: notify.StatusFailed, result: resultFailed, outcome: "failed", answer: answerSkip, skip: true}},
		{"no such mailbox", young, smtpErr(mail.OutcomePermanent, mail.StageRecipient, 550, "5.1.1"),
			want{write: writeFailed, to: notify.StatusFailed, result: resultFailed, outcome: "failed", answer: answerSkip, skip: true}},
		// Refused now, but an earlier attempt's outcome is unknown: the
		// refusal speaks for this attempt alone, and "failed" would say
		// none reached a provider.
		{"refused for good while an earlier attempt is unknown", inDoubt, &mail.SendError{Outcome: mail.OutcomePermanent, Stage: mail.StageData,
			Reply: mail.HTTPStatus(422), HandedOver: true, Err: errors.New("422")},
			want{write: writeHeld, to: notify.StatusHeld, result: resultHeld, outcome: "held", answer: answerSkip, skip: true}},
		{"deferred past the max age while an earlier attempt is unknown", oldInDoubt, smtpErr(mail.OutcomeTemporary, mail.StageData, 452, ""),
			want{write: writeHeld, to: notify.StatusHeld, result: resultHeld, outcome: "held", answer: answerSkip, skip: true}},
		{"no reply after the data", young, smtpErr(mail.OutcomeAmbiguous, mail.StageData, 0, ""),
			want{write: writeAmbiguous, result: resultLeftForReconciler, outcome: "ambiguous"}},
		{"an error nobody classified", young, errors.New("something odd"),
			want{write: writeAmbiguous, result: resultLeftForReconciler, outcome: "ambiguous"}},
	} {
		s := decideOutcome(tt.d, "queued-1", tt.err, now, 48*time.Hour, true) // a provider that deduplicates: Resend
		tt.want.check(t, tt.name, s)
		if tt.want.answer == answerProviderWait && s.providerDown == nil {
			t.Errorf("%s: the worker is not told that the provider refuses us", tt.name)
		}
		if tt.want.write == writeSent && s.providerID != "queued-1" {
			t.Errorf("%s: provider id %q, want queued-1", tt.name, s.providerID)
		}
	}
}

// A server error answered after the request was written leaves the
// message possibly taken, whatever the provider's classification calls
// it. Only a provider that refuses a second message under our key may
// get it again at once (pinned to it); any other is asked first: the row
// is left for the reconciler's look-up. Either way the worker stops
// sending to the unwell provider until a probe passes.
func TestDecideOutcomeOfAServerErrorAfterTheHandOver(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	young := notify.Delivery{Template: "order-confirmation", TryingSince: now.Add(-time.Minute)}
	unavailable := &mail.SendError{Outcome: mail.OutcomeUnavailable, Stage: mail.StageData, Reply: mail.HTTPStatus(503), HandedOver: true, Err: errors.New("503")}
	ambiguous := &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Reply: mail.HTTPStatus(500), HandedOver: true, Err: errors.New("500")}
	for _, tt := range []struct {
		name    string
		err     *mail.SendError
		dedupes bool
		want    want
	}{
		{"a deduplicating provider's 503", unavailable, true,
			want{write: writeRetry, to: notify.StatusPending, refund: true, pin: true, result: resultRetried, outcome: "retried", retry: "provider_unavailable", answer: answerProviderWait}},
		{"another provider's 503 classified unavailable", unavailable, false,
			want{write: writeAmbiguous, result: resultLeftForReconciler, outcome: "ambiguous"}},
		{"another provider's 500, ambiguous", ambiguous, false,
			want{write: writeAmbiguous, result: resultLeftForReconciler, outcome: "ambiguous"}},
		{"a deduplicating provider's ambiguous 500", ambiguous, true,
			want{write: writeAmbiguous, result: resultLeftForReconciler, outcome: "ambiguous"}},
	} {
		s := decideOutcome(young, "", tt.err, now, 48*time.Hour, tt.dedupes)
		tt.want.check(t, tt.name, s)
		if s.providerDown == nil {
			t.Errorf("%s: the worker goes on sending to a provider that answers server errors", tt.name)
		}
	}
}

// Every verdict of a claim that took nothing, decided from a table.
func TestDecideUnclaimed(t *testing.T) {
	id := uuid.New()
	lastError := "451 try later"
	pending := notify.Delivery{ID: id, Status: notify.StatusPending, LastError: lastError}
	sent := notify.Delivery{ID: id, Status: notify.StatusSent}
	failed := notify.Delivery{ID: id, Status: notify.StatusFailed}
	unknownSince := time.Now().Add(-time.Hour)
	inDoubt := notify.Delivery{ID: id, Status: notify.StatusPending, Provider: "resend", ProviderPinned: true, UnsettledSince: &unknownSince}
	for _, tt := range []struct {
		v    notify.Verdict
		d    notify.Delivery
		want want
	}{
		{verdictMissing, notify.Delivery{ID: id}, want{result: resultUnknownDelivery, answer: answerSkip, skip: true}},
		{notify.VerdictNotTask, pending, want{result: resultBadPayload, answer: answerSkip, skip: true}},
		{notify.VerdictSettled, sent, want{write: writeDuplicate, result: duplicateResult("database"), duplicate: "database"}},
		{notify.VerdictSettled, failed, want{write: writeDuplicate, result: duplicateResult("database"), duplicate: "database"}},
		{notify.VerdictLeased, pending, want{write: writeDuplicate, result: resultOwnedByAnotherWorker, duplicate: "database"}},
		{notify.VerdictHandedOver, pending, want{write: writeNoteAmbiguous, result: resultLeftForReconciler, outcome: "ambiguous"}},
		{notify.VerdictUnknownTemplate, pending, want{result: resultUnknownTemplate, handedBack: "unknown_template", answer: answerWait}},
		{notify.VerdictTooOld, pending, want{write: writeExpired, to: notify.StatusFailed, result: resultExpired, outcome: "failed", answer: answerSkip, skip: true}},
		{notify.VerdictSuppressed, pending, want{write: writeSuppressed, to: notify.StatusSuppressed, result: resultSuppressed, outcome: "suppressed"}},
		{notify.VerdictBlocked, pending, want{write: writeBlocked, result: resultBlocked}},
		{notify.VerdictUnsubscribed, pending, want{write: writeUnsubscribed, to: notify.StatusSuppressed, result: resultSuppressed, outcome: "suppressed"}},
		// Held back while an attempt's outcome is unknown: expiring or
		// suppressing it would say "not sent" of what a provider may
		// hold. Nothing is written; the reconciler asks the provider.
		{notify.VerdictTooOld, inDoubt, want{result: resultAwaitingSettlement}},
		{notify.VerdictSuppressed, inDoubt, want{result: resultAwaitingSettlement}},
		{notify.VerdictUnsubscribed, inDoubt, want{result: resultAwaitingSettlement}},
		{notify.VerdictNotYet, pending, want{result: resultNotYet, answer: answerWait}},
		{notify.VerdictPinnedElsewhere, pending, want{result: resultProviderUnavailable, handedBack: "provider_unavailable", answer: answerProviderWait}},
		{verdictPinnedMissing, pending, want{result: resultPinnedMissing, handedBack: "pinned_to_missing_provider", answer: answerWait}},
		{"from_a_newer_build", pending, want{result: resultRaced, answer: answerWait}},
	} {
		s := decideUnclaimed(tt.v, tt.d, "abc", 48*time.Hour, time.Now())
		tt.want.check(t, string(tt.v)+"/"+string(tt.d.Status), s)
		if s.cacheSent != (tt.v == notify.VerdictSettled && tt.d.Status == notify.StatusSent) {
			t.Errorf("%s/%s: cacheSent = %v: only a sent row is remembered in the cache", tt.v, tt.d.Status, s.cacheSent)
		}
		if tt.v == notify.VerdictBlocked && !s.blocked {
			t.Errorf("%s: not counted as blocked", tt.v)
		}
	}
	// No provider may take a claimed row now: it goes back, uncounted,
	// and waits for a probe.
	for _, anyUp := range []bool{false, true} {
		s := decideNoRoute("resend", anyUp)
		want{write: writeRetry, to: notify.StatusPending, refund: true, result: resultProviderUnavailable, outcome: "retried",
			retry: "provider_unavailable", answer: answerProviderWait}.check(t, fmt.Sprintf("no route, another up: %v", anyUp), s)
		if anyUp != strings.Contains(s.reason, `pinned to provider "resend"`) || s.providerDown != nil {
			t.Errorf("no route (another up: %v): reason %q, provider marked down: %v", anyUp, s.reason, s.providerDown != nil)
		}
	}
	// A task early for its delivery comes back at the delivery's time.
	now := time.Now()
	later := now.Add(3 * time.Hour)
	scheduled := notify.Delivery{ID: id, Status: notify.StatusPending, NotBefore: &later}
	if s := decideUnclaimed(notify.VerdictNotYet, scheduled, "abc", 48*time.Hour, now); s.waitBase < 3*time.Hour || s.waitBase > 3*time.Hour+time.Second || s.write != writeNothing {
		t.Errorf("not yet: waits %s, writes %v; want 3h and nothing", s.waitBase, s.write)
	}
	if s := decideUnclaimed(notify.VerdictTooOld, pending, "abc", 48*time.Hour, time.Now()); s.reason != "expired: not sent within DELIVERY_MAX_AGE (48h0m0s); last error: 451 try later" {
		t.Errorf("expiry reason = %q", s.reason)
	}
}

// Whether an attempt may go to the provider it is pinned to, by the
// window in which that provider refuses a second message under our key:
// counted from the earliest unknown attempt, or, for a delivery a release
// before unsettled_since pinned, from the delivery's creation.
func TestDecidePastResendWindow(t *testing.T) {
	t.Parallel()
	now := time.Now()
	at := func(ago time.Duration) *time.Time { t := now.Add(-ago); return &t }
	resend := "resend"
	row := func(pinned bool, provider string, unsettled *time.Time, created time.Duration) notify.Delivery {
		return notify.Delivery{ProviderPinned: pinned, Provider: provider, UnsettledSince: unsettled, CreatedAt: now.Add(-created)}
	}
	for _, tc := range []struct {
		name   string
		d      notify.Delivery
		window time.Duration
		held   bool
	}{
		{"within the window", row(true, resend, at(22*time.Hour), 30*time.Hour), 23 * time.Hour, false},
		{"past the window", row(true, resend, at(24*time.Hour), 30*time.Hour), 23 * time.Hour, true},
		{"not pinned", row(false, resend, nil, 30*time.Hour), 23 * time.Hour, false},
		{"pinned to another provider", row(true, "postmark", at(48*time.Hour), 50*time.Hour), 23 * time.Hour, false},
		{"a provider without a window", row(true, resend, at(48*time.Hour), 50*time.Hour), 0, false},
		{"pinned before the column, created long ago", row(true, resend, nil, 30*time.Hour), 23 * time.Hour, true},
		{"pinned before the column, created lately", row(true, resend, nil, time.Hour), 23 * time.Hour, false},
	} {
		s, held := decidePastResendWindow(tc.d, resend, tc.window, now)
		if held != tc.held || held && (s.write != writeHeld || s.to != notify.StatusHeld || !strings.Contains(s.reason, "second e-mail") || s.answer != answerSkip) {
			t.Errorf("%s: held %v, step %+v; want held %v", tc.name, held, s, tc.held)
		}
	}
}

// A refusal for pace — Resend's 429 with its headers, an SMTP relay's
// 451 4.7.1 rate reply, a pause named in the body — means nothing was
// taken: the row goes back to pending, the attempt not counted, nothing
// pinned and no breaker opened; the task comes back after the pause the
// answer asked for, and the answer goes to the budget.
func TestDecideOutcomeOfARefusalForPace(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	young := notify.Delivery{Template: "order-confirmation", TryingSince: now.Add(-time.Minute)}
	for _, tt := range []struct {
		name      string
		err       *mail.SendError
		wantPause time.Duration
	}{
		{"Resend's 429", &mail.SendError{Outcome: mail.OutcomeThrottled, Stage: mail.StageConnect, HandedOver: true,
			Reply: mail.HTTPStatus(429), Header: http.Header{"Retry-After": {"3"}, "Ratelimit-Limit": {"2"}, "Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"3"}},
			Err: errors.New("429 rate_limit_exceeded")}, 3 * time.Second},
		{"a relay's rate reply", &mail.SendError{Outcome: mail.OutcomeThrottled, Stage: mail.StageSender,
			Reply: mail.Reply{Protocol: mail.ProtocolSMTP, Code: 451, Enhanced: "4.7.1", Text: "Rate limit exceeded, try again later"},
			Err:   errors.New("451 4.7.1")}, pace.DefaultPause},
		{"a daily quota named in the body", &mail.SendError{Outcome: mail.OutcomeThrottled, Stage: mail.StageConnect, HandedOver: true,
			Reply: mail.HTTPStatus(429), Pause: 2 * time.Hour, Err: errors.New("429 daily_quota_exceeded")}, pace.MaxPause},
	} {
		s := decideOutcome(young, "", tt.err, now, 48*time.Hour, false)
		want{write: writeRetry, to: notify.StatusPending, refund: true, result: resultPaced, outcome: "retried", retry: "throttled", answer: answerWait}.check(t, tt.name, s)
		if s.providerDown != nil {
			t.Errorf("%s: the breaker opens on a pace", tt.name)
		}
		if s.throttle == nil || s.throttle.Pause != tt.wantPause || s.waitBase != tt.wantPause {
			t.Errorf("%s: throttle %+v, wait %v; want a pause of %v for the budget and the task", tt.name, s.throttle, s.waitBase, tt.wantPause)
		}
	}
}
