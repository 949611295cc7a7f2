package ses_test

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"net/mail"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
	sekalimail "github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/ses"
	"github.com/sekali-dev/sekali/internal/ses/sestest"
)

var _ sekalimail.Provider = (*ses.Provider)(nil)

// awsEnv gives the AWS SDK's default chain the fake's key, and nothing
// of the machine's: no shared files, no instance metadata.
func awsEnv(t *testing.T, srv *sestest.Server) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_MAX_ATTEMPTS", "5") // the provider must not retry, whatever the environment says
}

func sender(t *testing.T, timeout time.Duration) (*sestest.Server, *ses.Provider) {
	t.Helper()
	srv := sestest.NewServer("eu-west-1")
	t.Cleanup(srv.Close)
	awsEnv(t, srv)
	srv.AddConfigurationSet("sekali-events")
	p, err := ses.New(ses.Config{Region: srv.Region, Endpoint: srv.URL, ConfigurationSet: "sekali-events",
		From: "Toko Ana <orders@shop.example>", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return srv, p
}

func mailMessage(n int) sekalimail.Message {
	key := fmt.Sprintf("order-confirmation:0190f3c2-7d4e-7a1b-9c3d-5e6f7a8b9c%02d:budi@example.com", n)
	return sekalimail.Message{To: "budi@example.com", Subject: "Pesanan Anda", Text: "Terima kasih", HTML: "<p>Terima kasih</p>",
		MessageID: sekalimail.MessageID(key, "shop.example"), IdempotencyKey: key, FromName: "Toko Ana Jaya",
		ReplyTo: "help@shop.example"}
}

func send(p *ses.Provider, m sekalimail.Message) (string, error) {
	return p.Send(context.Background(), m, func() error { return nil })
}

func TestSendsOurRawMessageSignedWithTheSDKChain(t *testing.T) {
	srv, p := sender(t, 5*time.Second)
	m := mailMessage(1)
	id, err := send(p, m)
	if err != nil {
		t.Fatal(err)
	}
	msgs := srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages at SES, want 1", len(msgs))
	}
	got := msgs[0]
	if id != got.MessageID {
		t.Errorf("provider id %q, SES's MessageId %q", id, got.MessageID)
	}
	from, err := (&mail.AddressParser{WordDecoder: &mime.WordDecoder{}}).Parse(got.Header.Get("From"))
	if err != nil || from.Name != "Toko Ana Jaya" || from.Address != "orders@shop.example" {
		t.Errorf("From %q (%v), want the template's name at MAIL_FROM's address", got.Header.Get("From"), err)
	}
	for name, want := range map[string]string{
		"Idempotency-Key": "", // SES deduplicates by no key of ours: the message carries none
		"Auto-Submitted":  "auto-generated", "Reply-To": "<help@shop.example>", "To": "<budi@example.com>",
	} {
		if v := got.Header.Get(name); v != want {
			t.Errorf("%s: %q, want %q", name, v, want)
		}
	}
	if got.Header.Get("List-Unsubscribe") != "" {
		t.Error("a transactional message carries List-Unsubscribe")
	}
	if got.Tags[ses.TagKey] != sekalimail.KeyHash(m.IdempotencyKey) || got.ConfigurationSet != "sekali-events" {
		t.Errorf("tags %v, configuration set %q: want %s=KeyHash and sekali-events (the events carry them)", got.Tags, got.ConfigurationSet, ses.TagKey)
	}
	if !strings.Contains(string(got.Raw), "Message-ID: <"+m.MessageID+">") {
		t.Error("the raw message lacks our Message-ID (SES replaces it, but it goes with the message)")
	}
	if got.From != "orders@shop.example" || len(got.To) != 1 || got.To[0] != "budi@example.com" {
		t.Errorf("FromEmailAddress %q, Destination %v", got.From, got.To)
	}
}

func TestSubscriptionMessageCarriesOneClickUnsubscribe(t *testing.T) {
	srv, p := sender(t, 5*time.Second)
	m := mailMessage(2)
	m.ListUnsubscribe = "<https://shop.example/sekali/v1/unsubscribe/tok>"
	if _, err := send(p, m); err != nil {
		t.Fatal(err)
	}
	h := srv.Messages()[0].Header
	if h.Get("List-Unsubscribe") != m.ListUnsubscribe || h.Get("List-Unsubscribe-Post") != sekalimail.ListUnsubscribePost {
		t.Errorf("List-Unsubscribe %q, -Post %q", h.Get("List-Unsubscribe"), h.Get("List-Unsubscribe-Post"))
	}
}

func TestAWrongKeyIsRefusedByTheSignatureCheck(t *testing.T) {
	srv, _ := sender(t, 5*time.Second)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
	wrong, err := ses.New(ses.Config{Region: srv.Region, Endpoint: srv.URL, From: "orders@shop.example", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	_, err = send(wrong, mailMessage(3))
	if se := httpprovidertest.SendError(t, err); se.Outcome != sekalimail.OutcomeUnavailable || se.Stage != sekalimail.StageAuth || se.Reply.Code != 403 {
		t.Errorf("wrong secret: %v (outcome %v, stage %s, reply %q), want unavailable at auth, http 403", err, se.Outcome, se.Stage, se.Reply)
	}
	if err := wrong.Probe(context.Background()); err == nil {
		t.Error("the probe passed with a wrong secret")
	}
	if len(srv.Messages()) != 0 {
		t.Error("a message was sent with a wrong signature")
	}
}

func TestClassifiesSESAnswers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fault    *sestest.Fault
		setup    func(*sestest.Server)
		outcome  sekalimail.Outcome
		stage    sekalimail.Stage
		status   int
		sentHere bool // the fake holds the message
	}{
		{name: "content rejected", fault: &sestest.Fault{Status: 400, Type: "MessageRejected", Message: "Message contains a virus"},
			outcome: sekalimail.OutcomeTemporary, stage: sekalimail.StageData, status: 400},
		{name: "our identity not verified", setup: func(s *sestest.Server) { s.Verify("other.example") },
			outcome: sekalimail.OutcomeUnavailable, stage: sekalimail.StageSender, status: 400},
		{name: "sandbox recipient not verified", setup: func(s *sestest.Server) { s.Verify("shop.example"); s.SetSandbox(true) },
			outcome: sekalimail.OutcomePermanent, stage: sekalimail.StageRecipient, status: 400},
		{name: "neither verified in the sandbox", setup: func(s *sestest.Server) { s.Verify("other.example"); s.SetSandbox(true) },
			outcome: sekalimail.OutcomeUnavailable, stage: sekalimail.StageSender, status: 400},
		{name: "MAIL FROM domain", fault: &sestest.Fault{Status: 400, Type: "MailFromDomainNotVerifiedException", Message: "not verified"},
			outcome: sekalimail.OutcomeUnavailable, stage: sekalimail.StageSender, status: 400},
		{name: "sending paused", fault: &sestest.Fault{Status: 400, Type: "SendingPausedException", Message: "paused"},
			outcome: sekalimail.OutcomeUnavailable, stage: sekalimail.StageSender, status: 400},
		{name: "account suspended", fault: &sestest.Fault{Status: 400, Type: "AccountSuspendedException", Message: "suspended"},
			outcome: sekalimail.OutcomeUnavailable, stage: sekalimail.StageSender, status: 400},
		{name: "no such configuration set", fault: &sestest.Fault{Status: 404, Type: "NotFoundException", Message: "Configuration set <x> does not exist."},
			outcome: sekalimail.OutcomeUnavailable, stage: sekalimail.StageSender, status: 404},
		{name: "throttled", fault: &sestest.Fault{Status: 429, Type: "TooManyRequestsException", Message: "Maximum sending rate exceeded."},
			outcome: sekalimail.OutcomeThrottled, stage: sekalimail.StageConnect, status: 429},
		{name: "daily quota", fault: &sestest.Fault{Status: 400, Type: "LimitExceededException", Message: "Daily message quota exceeded."},
			outcome: sekalimail.OutcomeThrottled, stage: sekalimail.StageConnect, status: 400},
		{name: "access denied", fault: &sestest.Fault{Status: 403, Type: "AccessDeniedException", Message: "not authorized to perform ses:SendEmail"},
			outcome: sekalimail.OutcomeUnavailable, stage: sekalimail.StageAuth, status: 403},
		{name: "bad request naming the recipient", fault: &sestest.Fault{Status: 400, Type: "BadRequestException", Message: "Illegal address: budi@example.com"},
			outcome: sekalimail.OutcomePermanent, stage: sekalimail.StageRecipient, status: 400},
		{name: "bad request naming our sender", fault: &sestest.Fault{Status: 400, Type: "BadRequestException", Message: "Illegal address: orders@shop.example"},
			outcome: sekalimail.OutcomeUnavailable, stage: sekalimail.StageSender, status: 400},
		{name: "bad request about an address it does not name", fault: &sestest.Fault{Status: 400, Type: "BadRequestException", Message: "Illegal address"},
			outcome: sekalimail.OutcomeTemporary, stage: sekalimail.StageData, status: 400},
		{name: "bad request about the message", fault: &sestest.Fault{Status: 400, Type: "BadRequestException", Message: "Message length is more than 40 MB"},
			outcome: sekalimail.OutcomeTemporary, stage: sekalimail.StageData, status: 400},
		{name: "internal failure after the request", fault: &sestest.Fault{Status: 500, Type: "InternalFailure", Message: "oops"},
			outcome: sekalimail.OutcomeAmbiguous, stage: sekalimail.StageData, status: 500},
		{name: "cut before sending", fault: &sestest.Fault{Cut: true},
			outcome: sekalimail.OutcomeAmbiguous, stage: sekalimail.StageData},
		{name: "cut after sending", fault: &sestest.Fault{Cut: true, Sent: true},
			outcome: sekalimail.OutcomeAmbiguous, stage: sekalimail.StageData, sentHere: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, p := sender(t, 5*time.Second)
			if tc.fault != nil {
				srv.FailNext("send", *tc.fault)
			}
			if tc.setup != nil {
				tc.setup(srv)
			}
			_, err := send(p, mailMessage(4))
			se := httpprovidertest.SendError(t, err)
			if se.Outcome != tc.outcome || se.Stage != tc.stage || se.Reply.Code != tc.status || !se.HandedOver {
				t.Errorf("%v: outcome %v at %s, reply %q, handed over %v; want %v at %s, status %d, handed over",
					err, se.Outcome, se.Stage, se.Reply, se.HandedOver, tc.outcome, tc.stage, tc.status)
			}
			if n := srv.Requests("send"); n != 1 {
				t.Errorf("%d requests: the SDK retried (AWS_MAX_ATTEMPTS=5 in the environment); want 1", n)
			}
			if n := len(srv.Messages()); (n == 1) != tc.sentHere {
				t.Errorf("%d messages at SES, want sent=%v", n, tc.sentHere)
			}
		})
	}
}

// Each of SES's answers about pace, in each error type it comes in, from
// the stand-in: throttled with the limit its message names, nothing
// taken, and the SDK retried none.
func TestEveryPaceAnswer(t *testing.T) {
	for _, a := range ses.PaceAnswers {
		for _, typ := range a.Types() {
			t.Run(typ+" "+a.Message(), func(t *testing.T) {
				srv, p := sender(t, 5*time.Second)
				srv.FailNext("send", sestest.Fault{Status: a.Status(), Type: typ, Message: a.Message()})
				_, err := send(p, mailMessage(4))
				se := httpprovidertest.SendError(t, err)
				wantPause := time.Duration(0)
				if a.Throttle() == sekalimail.ThrottleQuota {
					wantPause = ses.QuotaPause
				}
				if se.Outcome != sekalimail.OutcomeThrottled || se.Throttle != a.Throttle() || se.Pause != wantPause || se.MayHaveAccepted() {
					t.Errorf("%v: %s (throttle %q, pause %s), want throttled for %q, pause %s (%s)", err, se.Outcome, se.Throttle, se.Pause, a.Throttle(), wantPause, a.Who())
				}
				if srv.Requests("send") != 1 || len(srv.Messages()) != 0 {
					t.Errorf("%d requests, %d messages; want 1 and none", srv.Requests("send"), len(srv.Messages()))
				}
			})
		}
	}
}

func TestNoAnswerBeforeTheRequestIsUnavailable(t *testing.T) {
	srv, p := sender(t, 5*time.Second)
	srv.Close()
	httpprovidertest.UnreachableIsUnavailable(t, p, nil, mailMessage(5))
}

func TestHandOver(t *testing.T) {
	srv, p := sender(t, 5*time.Second)
	sent := func() int { return srv.Requests("send") }
	httpprovidertest.RefusedHandOverSendsNothing(t, p, mailMessage(6), sent)

	srv, p = sender(t, 300*time.Millisecond)
	httpprovidertest.StallAfterHandOverSendsNothing(t, p, mailMessage(7), 600*time.Millisecond, func() int { return len(srv.Messages()) })
}

func TestProbe(t *testing.T) {
	srv, p := sender(t, 5*time.Second)
	if err := p.Probe(context.Background()); err != nil {
		t.Fatalf("probe: %v", err)
	}
	srv.PauseSending(true)
	err := p.Probe(context.Background())
	if se := httpprovidertest.SendError(t, err); se.Outcome != sekalimail.OutcomeUnavailable || !strings.Contains(err.Error(), "paused") {
		t.Errorf("paused account: %v, want unavailable, saying sending is paused", err)
	}
	srv.PauseSending(false)
	srv.FailNext("account", sestest.Fault{Status: 503, Type: "ServiceUnavailable", Message: "try later"})
	if se := httpprovidertest.SendError(t, p.Probe(context.Background())); se.Outcome != sekalimail.OutcomeUnavailable {
		t.Errorf("503 on the probe: %v, want unavailable", se)
	}
	if len(srv.Messages()) != 0 {
		t.Error("the probe sent a message")
	}
}

func TestConfig(t *testing.T) {
	bad := ses.Config{From: "not an address", Endpoint: "http://ses.example.com", ConfigurationSet: "has space", Timeout: -time.Second}
	err := bad.Validate()
	for _, want := range []string{"MAIL_FROM", "SES_ENDPOINT", "SES_CONFIGURATION_SET", "PROVIDER_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to name %s", err, want)
		}
	}
	srv := sestest.NewServer("eu-west-1")
	defer srv.Close()
	awsEnv(t, srv)
	_, err = ses.New(ses.Config{From: "orders@shop.example", Endpoint: srv.URL})
	if err == nil || !strings.Contains(err.Error(), "SES_REGION") {
		t.Errorf("no region anywhere: %v, want an error naming SES_REGION", err)
	}
	t.Setenv("AWS_REGION", srv.Region)
	p, err := ses.New(ses.Config{From: "orders@shop.example", Endpoint: srv.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("AWS_REGION from the SDK's chain: %v", err)
	}
	defer p.Close()
	if _, err := send(p, mailMessage(8)); err != nil {
		t.Errorf("send with the chain's region: %v", err)
	}
}

var _ sekalimail.LimitsReporter = (*ses.Provider)(nil)

// SES's sending quota, from the stand-in: past the send rate a send is
// throttled, past the daily quota throttled with a pause; neither took
// the message, and the SDK retried neither.
func TestSendQuotaIsThrottled(t *testing.T) {
	srv, p := sender(t, 5*time.Second)
	srv.SetSendQuota(1, -1)
	if _, err := send(p, mailMessage(10)); err != nil {
		t.Fatal(err)
	}
	_, err := send(p, mailMessage(11))
	se := httpprovidertest.SendError(t, err)
	if se.Outcome != sekalimail.OutcomeThrottled || se.Throttle != sekalimail.ThrottleMessages || se.Reply.Code != 429 || se.Pause != 0 || se.MayHaveAccepted() ||
		se.Header.Get("X-Amzn-Errortype") != "TooManyRequestsException" || !strings.Contains(err.Error(), "Maximum sending rate exceeded") {
		t.Errorf("past the rate: %v (pause %s, header %v), want throttled 429 without a pause, with the answer's header", err, se.Pause, se.Header)
	}

	srv.SetSendQuota(100, 2)
	if _, err := send(p, mailMessage(12)); err != nil {
		t.Fatal(err)
	}
	_, err = send(p, mailMessage(13))
	se = httpprovidertest.SendError(t, err)
	if se.Outcome != sekalimail.OutcomeThrottled || se.Throttle != sekalimail.ThrottleQuota || se.Reply.Code != 429 || se.Pause != ses.QuotaPause || !strings.Contains(err.Error(), "Daily message quota exceeded") {
		t.Errorf("past the daily quota: %v (pause %s), want throttled 429 with a pause of %s", err, se.Pause, ses.QuotaPause)
	}
	if n := len(srv.Messages()); n != 2 || srv.Throttled() != 1 || srv.QuotaExceeded() != 1 || srv.Requests("send") != 4 {
		t.Errorf("%d messages, %d throttled, %d over the quota after %d requests; want 2, 1, 1 after 4", n, srv.Throttled(), srv.QuotaExceeded(), srv.Requests("send"))
	}
}

// The account's limits come from GetAccount, which sends nothing.
func TestLimits(t *testing.T) {
	srv, p := sender(t, 5*time.Second)
	if _, err := send(p, mailMessage(14)); err != nil {
		t.Fatal(err)
	}
	l, err := p.Limits(context.Background())
	if err != nil || l != (sekalimail.Limits{Rate: 14, Daily: 50000, SentDaily: 1}) {
		t.Errorf("Limits = %+v, %v; want SES's default 14/s, 50000 a day, 1 sent", l, err)
	}
	srv.SetSendQuota(0.5, -1)
	if l, err := p.Limits(context.Background()); err != nil || l != (sekalimail.Limits{Rate: 0.5, SentDaily: 1}) {
		t.Errorf("an unlimited quota: %+v, %v; want rate 0.5, daily 0 (none)", l, err)
	}
	srv.SetSendQuota(1, 0)
	if _, err := p.Limits(context.Background()); err == nil {
		t.Error("an account that may send nothing: no error")
	}
	srv.FailNext("account", sestest.Fault{Status: 403, Type: "AccessDeniedException", Message: "not authorized to perform ses:GetAccount"})
	if _, err := p.Limits(context.Background()); httpprovidertest.SendError(t, err).Stage != sekalimail.StageAuth {
		t.Errorf("credentials without ses:GetAccount: %v, want an error at auth", err)
	}
	if n := len(srv.Messages()); n != 1 {
		t.Errorf("%d messages, want 1: Limits sends nothing", n)
	}
}

// A send's answer reaches the caller's observer through the SDK; the
// probe's does not (it carries no message).
func TestAnswersAreObserved(t *testing.T) {
	_, p := sender(t, 5*time.Second)
	var seen []int
	ctx := sekalimail.WithAnswerObserver(context.Background(), func(status int, _ http.Header) { seen = append(seen, status) })
	if _, err := p.Send(ctx, mailMessage(20), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := p.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != 200 {
		t.Errorf("observed %v, want the send's 200 alone", seen)
	}
}
