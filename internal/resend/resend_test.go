package resend_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/resend"
	"github.com/sekali-dev/sekali/internal/resend/resendtest"
	"github.com/sekali-dev/sekali/internal/testenv"
)

type bundle struct {
	srv *resendtest.Server
	p   *resend.Provider
}

func setup(t *testing.T) bundle {
	t.Helper()
	srv := resendtest.NewServer()
	t.Cleanup(srv.Close)
	return bundle{srv: srv, p: provider(t, srv, srv.SendingOnlyKey, 5*time.Second)}
}

func provider(t *testing.T, srv *resendtest.Server, key string, timeout time.Duration) *resend.Provider {
	t.Helper()
	p, err := resend.New(resend.Config{Config: httpprovider.Config{Key: key, From: "orders@shop.example", BaseURL: srv.URL, Timeout: timeout}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// message is one delivery; our keys are longer than the 256 characters
// Resend takes.
func message(n int) mail.Message {
	email := strings.Repeat("b", 60) + "@example.com"
	key := "order-confirmation:0190f3c2-7d4e-7a1b-9c3d-5e6f7a8b9c0d:" + email + strings.Repeat("-x", 100)
	return mail.Message{
		To: email, Subject: "Pesanan #" + string(rune('0'+n)), Text: "Terima kasih", HTML: "<p>Terima kasih</p>",
		MessageID: mail.MessageID(key, "shop.example"), IdempotencyKey: key,
	}
}

func TestSendIsOneEmailPerDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := message(1)
	if len(m.IdempotencyKey) <= 256 {
		t.Fatalf("the test key has %d bytes; it should be over Resend's limit", len(m.IdempotencyKey))
	}
	id, err := b.p.Send(context.Background(), m, httpprovidertest.Pass)
	if err != nil {
		t.Fatal(err)
	}
	msgs := b.srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d e-mails sent, want 1", len(msgs))
	}
	got := msgs[0]
	if got.ID != id || got.MessageID != m.MessageID || got.IdempotencyKey != resend.IdempotencyKey(m.IdempotencyKey) ||
		got.To[0] != m.To || got.From != "orders@shop.example" || got.Subject != m.Subject || got.Text != m.Text || got.HTML != m.HTML ||
		got.Tags[resend.MetadataKey] != mail.KeyHash(m.IdempotencyKey) {
		t.Errorf("sent %+v (id %s), want message %+v", got, id, m)
	}

	// The worker sends the same delivery again (a redelivered task, the
	// reconciler's resend): Resend answers with the first id.
	again, err := b.p.Send(context.Background(), m, httpprovidertest.Pass)
	if err != nil || again != id {
		t.Errorf("second send: %q, %v; want the first id %q", again, err, id)
	}
	if n := b.srv.CountByMessageID(m.MessageID); n != 1 || b.srv.Requests() != 2 {
		t.Errorf("%d e-mails after %d requests, want 1 after 2", n, b.srv.Requests())
	}
}

func TestIdempotencyKeyIsShortAndStable(t *testing.T) {
	t.Parallel()
	k := message(1).IdempotencyKey
	a, b := resend.IdempotencyKey(k), resend.IdempotencyKey(k)
	if a != b || len(a) != 71 || !strings.HasPrefix(a, "sekali-") || strings.Contains(a, "@") {
		t.Errorf("IdempotencyKey = %q, %q: want the same sekali-<64 hex> twice", a, b)
	}
	if resend.IdempotencyKey(k+"x") == a {
		t.Error("two keys give the same Idempotency-Key")
	}
}

// The answer is lost after Resend sent the e-mail: the send is
// ambiguous, and sending it again under the same key is one e-mail.
func TestAmbiguousSendResentIsOneEmail(t *testing.T) {
	t.Parallel()
	for _, sent := range []bool{true, false} {
		b := setup(t)
		m := message(2)
		b.srv.FailNext(resendtest.Fault{Cut: true, Sent: sent})
		_, err := b.p.Send(context.Background(), m, httpprovidertest.Pass)
		se := httpprovidertest.SendError(t, err)
		if se.Outcome != mail.OutcomeAmbiguous || !se.HandedOver || se.Stage != mail.StageData {
			t.Fatalf("sent=%v: cut after the request: %v (handed over %v), want ambiguous and handed over", sent, err, se.HandedOver)
		}
		id, err := b.p.Send(context.Background(), m, httpprovidertest.Pass)
		if err != nil {
			t.Fatalf("sent=%v: resend: %v", sent, err)
		}
		msgs := b.srv.Messages()
		if len(msgs) != 1 || msgs[0].ID != id {
			t.Errorf("sent=%v: %d e-mails (%+v), want one with id %s", sent, len(msgs), msgs, id)
		}
	}
}

func TestHandOverRefusedSendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	httpprovidertest.RefusedHandOverSendsNothing(t, b.p, message(3), b.srv.Requests)
}

// The request deadline counts from before the last lease check: a
// worker that stalls past it sends nothing.
func TestStallAfterHandOverSendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := provider(t, b.srv, b.srv.SendingOnlyKey, 100*time.Millisecond)
	httpprovidertest.StallAfterHandOverSendsNothing(t, p, message(4), 200*time.Millisecond, b.srv.Requests)
}

func TestNoAnswerInTimeIsAmbiguous(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := provider(t, b.srv, b.srv.SendingOnlyKey, 300*time.Millisecond)
	arrived, release := b.srv.HoldNext()
	defer release()
	_, err := p.Send(context.Background(), message(5), httpprovidertest.Pass)
	<-arrived
	se := httpprovidertest.SendError(t, err)
	if se.Outcome != mail.OutcomeAmbiguous || !se.HandedOver {
		t.Errorf("no answer within the timeout: %v, want ambiguous, handed over", err)
	}
}

func TestSameKeyOtherBodySaysResendTookTheFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := message(6)
	if _, err := b.p.Send(context.Background(), m, httpprovidertest.Pass); err != nil {
		t.Fatal(err)
	}
	m.Subject += " (template changed)"
	_, err := b.p.Send(context.Background(), m, httpprovidertest.Pass)
	se := httpprovidertest.SendError(t, err)
	if se.Outcome != mail.OutcomeKeyTaken || se.Reply.Code != 409 || !strings.Contains(err.Error(), "invalid_idempotent_request") {
		t.Errorf("same key, other body: %v, want key taken: 409 invalid_idempotent_request", err)
	}
	if n := b.srv.CountByMessageID(m.MessageID); n != 1 {
		t.Errorf("%d e-mails, want 1", n)
	}
}

func TestConcurrentSameKeyIsInFlightThenTheFirstAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := message(7)
	arrived, release := b.srv.HoldNext()
	var (
		wg       sync.WaitGroup
		firstID  string
		firstErr error
	)
	wg.Go(func() { firstID, firstErr = b.p.Send(context.Background(), m, httpprovidertest.Pass) })
	<-arrived
	_, err := b.p.Send(context.Background(), m, httpprovidertest.Pass)
	se := httpprovidertest.SendError(t, err)
	if se.Outcome != mail.OutcomeKeyInFlight || se.Reply.Code != 409 || !strings.Contains(err.Error(), "concurrent_idempotent_requests") {
		t.Errorf("while the first is in flight: %v, want key in flight: 409 concurrent_idempotent_requests", err)
	}
	release()
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	id, err := b.p.Send(context.Background(), m, httpprovidertest.Pass)
	if err != nil || id != firstID {
		t.Errorf("after the first finished: %q, %v; want %q", id, err, firstID)
	}
	if n := b.srv.CountByMessageID(m.MessageID); n != 1 {
		t.Errorf("%d e-mails, want 1", n)
	}
}

// Every documented error maps to the outcome the worker needs.
func TestErrorsAreClassified(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status  int
		name    string
		message string
		outcome mail.Outcome
		stage   mail.Stage
	}{
		{401, "missing_api_key", "Missing API key in the authorization header.", mail.OutcomeUnavailable, mail.StageAuth},
		{401, "validation_error", "API key is invalid", mail.OutcomeUnavailable, mail.StageAuth},
		{403, "invalid_api_key", "API key is invalid.", mail.OutcomeUnavailable, mail.StageAuth},
		{403, "restricted_api_key", "API key is not active", mail.OutcomeUnavailable, mail.StageAuth},
		{403, "suspended_api_key", "This API key is suspended", mail.OutcomeUnavailable, mail.StageAuth},
		{403, "validation_error", "The `shop.example` domain is not verified. Please, add and verify your domain.", mail.OutcomeUnavailable, mail.StageSender},
		{403, "validation_error", "You can only send testing emails to your own email address (`me@example.com`).", mail.OutcomeUnavailable, mail.StageSender},
		{429, "rate_limit_exceeded", "Too many requests.", mail.OutcomeThrottled, mail.StageConnect},
		{429, "daily_quota_exceeded", "You have exceeded your daily email sending quota.", mail.OutcomeThrottled, mail.StageConnect},
		{429, "monthly_quota_exceeded", "You have exceeded your monthly email sending quota.", mail.OutcomeThrottled, mail.StageConnect},
		{500, "application_error", "An unexpected error occurred.", mail.OutcomeUnavailable, mail.StageData},
		{503, "service_unavailable", "API is temporarily unavailable", mail.OutcomeUnavailable, mail.StageData},
		{502, "", "<html>Bad Gateway</html>", mail.OutcomeUnavailable, mail.StageData},
		{404, "not_found", "The requested endpoint does not exist.", mail.OutcomeUnavailable, mail.StageConnect},
		{405, "method_not_allowed", "Method is not allowed for the requested path.", mail.OutcomeUnavailable, mail.StageConnect},
		{400, "invalid_idempotency_key", "Idempotency keys, if present, must have between 1 and 256 characters.", mail.OutcomeUnavailable, mail.StageConnect},
		{409, "concurrent_idempotent_requests", "There is another request in progress with the same idempotency key.", mail.OutcomeKeyInFlight, mail.StageData},
		{409, "invalid_idempotent_request", "This idempotency key has been used … request body was modified.", mail.OutcomeKeyTaken, mail.StageData},
		{422, "validation_error", "Invalid `to` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format.", mail.OutcomePermanent, mail.StageRecipient},
		{422, "invalid_to_address", "Invalid to address", mail.OutcomePermanent, mail.StageRecipient},
		{422, "validation_error", "Invalid `from` field.", mail.OutcomeUnavailable, mail.StageSender},
		{400, "validation_error", "API key is invalid", mail.OutcomeUnavailable, mail.StageAuth},
		{422, "missing_required_field", "Missing `to` field.", mail.OutcomeTemporary, mail.StageData},
		{422, "invalid_parameter", "The `id` must be a valid UUID.", mail.OutcomeTemporary, mail.StageData},
		{400, "validation_error", "Invalid `subject` field.", mail.OutcomeTemporary, mail.StageData},
	}
	b := setup(t)
	for _, c := range cases {
		b.srv.FailNext(resendtest.Fault{Status: c.status, Name: c.name, Message: c.message})
		_, err := b.p.Send(context.Background(), message(8), httpprovidertest.Pass)
		se := httpprovidertest.SendError(t, err)
		if se.Outcome != c.outcome || se.Stage != c.stage || se.Reply.Code != c.status || !se.HandedOver {
			t.Errorf("%d %s %q: %s at %s (code %d, handed over %v), want %s at %s", c.status, c.name, c.message, se.Outcome, se.Stage, se.Reply.Code, se.HandedOver, c.outcome, c.stage)
		}
		// A server error after the request was written, or an earlier
		// request under the key still in flight, says nothing certain: the
		// log and the history must not say "at connect".
		if mayHave := c.status >= 500 || c.name == "concurrent_idempotent_requests"; se.MayHaveAccepted() != mayHave || strings.Contains(se.Error(), "may have taken") != mayHave {
			t.Errorf("%d: %q, may have accepted %v; want %v, and said", c.status, se.Error(), se.MayHaveAccepted(), mayHave)
		}
		// Only a quota names a pause in its body; a rate limit's is in
		// its headers.
		if quota := strings.HasSuffix(c.name, "_quota_exceeded"); (se.Pause > 0) != quota || se.Pause > resend.QuotaPause {
			t.Errorf("%d %s: pause %s, want one (at most %s) only for a quota", c.status, c.name, se.Pause, resend.QuotaPause)
		}
	}
	if n := len(b.srv.Messages()); n != 0 {
		t.Errorf("%d e-mails sent on error answers", n)
	}
}

// The server's own refusals (not injected) are classified too.
func TestRefusalsOfTheServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := provider(t, b.srv, "re_wrong", 5*time.Second).Send(context.Background(), message(1), httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeUnavailable || se.Stage != mail.StageAuth {
		t.Errorf("wrong key: %v, want unavailable at auth", err)
	}
	b.srv.SetVerifiedDomains("other.example")
	_, err = b.p.Send(context.Background(), message(1), httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeUnavailable || se.Stage != mail.StageSender || se.Reply.Code != 403 {
		t.Errorf("unverified domain: %v, want unavailable at sender, 403", err)
	}
	if n := len(b.srv.Messages()); n != 0 {
		t.Errorf("%d e-mails sent", n)
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A closed server's port may be taken again at once (testenv.RefusedAddr).
	b.srv.URL = "http://" + testenv.RefusedAddr(t)
	httpprovidertest.UnreachableIsUnavailable(t, provider(t, b.srv, b.srv.SendingOnlyKey, 5*time.Second), nil, message(1))
}

func TestProbe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, key := range []string{b.srv.APIKey, b.srv.SendingOnlyKey} {
		if err := provider(t, b.srv, key, time.Second).Probe(context.Background()); err != nil {
			t.Errorf("probe with a valid key: %v", err)
		}
	}
	err := provider(t, b.srv, "re_wrong", time.Second).Probe(context.Background())
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeUnavailable {
		t.Errorf("probe with a wrong key: %v, want unavailable", err)
	}
	if n := b.srv.Requests(); n != 0 {
		t.Errorf("the probe made %d send requests", n)
	}
}

// What the reconciler is told of Resend: it deduplicates by our key for
// 24 hours, and so needs no look-up.
func TestDescriptor(t *testing.T) {
	t.Parallel()
	if d := resend.Descriptor; d.Dedup != 24*time.Hour || d.Lookup != nil || d.Sender == nil || d.Webhook == nil {
		t.Errorf("Resend's descriptor: %+v", d)
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	t.Parallel()
	err := resend.Config{Config: httpprovider.Config{BaseURL: "http://api.resend.com", From: "Shop <orders at shop.example>", Timeout: -1}}.Validate()
	for _, want := range []string{"RESEND_API_KEY", "MAIL_FROM", "RESEND_BASE_URL", "PROVIDER_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %s", err, want)
		}
	}
	if err := (resend.Config{Config: httpprovider.Config{Key: "re_x", From: "orders@shop.example"}}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// A template's sender name and Reply-To reach Resend, with
// Auto-Submitted; MAIL_FROM's own name stays when the template has none.
func TestSenderIdentity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p, err := resend.New(resend.Config{Config: httpprovider.Config{Key: b.srv.SendingOnlyKey, From: "Toko Ana <orders@shop.example>", BaseURL: b.srv.URL, Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	m := message(1)
	m.FromName, m.ReplyTo = "Toko Büdi, Jakarta", "cs@shop.example"
	if _, err := p.Send(context.Background(), m, httpprovidertest.Pass); err != nil {
		t.Fatal(err)
	}
	other := message(2)
	other.IdempotencyKey += "-other"
	other.MessageID = mail.MessageID(other.IdempotencyKey, "shop.example")
	if _, err := p.Send(context.Background(), other, httpprovidertest.Pass); err != nil {
		t.Fatal(err)
	}
	msgs := b.srv.Messages()
	if got := msgs[0]; got.From != `"Toko Büdi, Jakarta" <orders@shop.example>` || len(got.ReplyTo) != 1 || got.ReplyTo[0] != "cs@shop.example" ||
		got.Headers["Auto-Submitted"] != "auto-generated" {
		t.Errorf("from %q, reply-to %v, headers %v", got.From, got.ReplyTo, got.Headers)
	}
	if got := msgs[1]; got.From != "Toko Ana <orders@shop.example>" || len(got.ReplyTo) != 0 {
		t.Errorf("without a template's sender: from %q, reply-to %v", got.From, got.ReplyTo)
	}
}

// Resend's own limits, from the stand-in: beyond the rate a send is
// throttled with the answer's headers; beyond the daily quota with a
// pause until the next UTC midnight. Neither took the message.
func TestLimitsOfTheServerAreThrottled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetRateLimit(1)
	if _, err := b.p.Send(context.Background(), message(1), httpprovidertest.Pass); err != nil {
		t.Fatal(err)
	}
	_, err := b.p.Send(context.Background(), message(2), httpprovidertest.Pass)
	se := httpprovidertest.SendError(t, err)
	if se.Outcome != mail.OutcomeThrottled || se.Reply.Code != 429 || se.Pause != 0 || se.MayHaveAccepted() || !se.HandedOver ||
		se.Header.Get("Retry-After") != "1" || se.Header.Get("Ratelimit-Remaining") != "0" || !strings.Contains(se.Error(), "rate_limit_exceeded") {
		t.Errorf("over the rate: %v (header %v), want throttled 429 rate_limit_exceeded with retry-after", err, se.Header)
	}
	b.srv.SetRateLimit(0)
	b.srv.SetDailyQuota(1)
	other := message(3)
	other.IdempotencyKey += "-3"
	_, err = b.p.Send(context.Background(), other, httpprovidertest.Pass)
	se = httpprovidertest.SendError(t, err)
	if se.Outcome != mail.OutcomeThrottled || se.Pause <= 0 || se.Pause > 24*time.Hour || !strings.Contains(se.Error(), "daily_quota_exceeded") {
		t.Errorf("over the daily quota: %v (pause %s), want throttled with a pause of at most a day", err, se.Pause)
	}
	if n := len(b.srv.Messages()); n != 1 {
		t.Errorf("%d e-mails, want 1", n)
	}
}
