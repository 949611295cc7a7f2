package postmark_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/postmark"
	"github.com/sekali-dev/sekali/internal/postmark/postmarktest"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// Both implement the interfaces the worker and the reconciler consume.
var (
	_ mail.Provider = (*postmark.Provider)(nil)
	_ mail.Lookup   = (*postmark.Lookup)(nil)
)

type bundle struct {
	srv *postmarktest.Server
	p   *postmark.Provider
	l   *postmark.Lookup
}

func setup(t *testing.T) bundle {
	t.Helper()
	srv := postmarktest.NewServer()
	t.Cleanup(srv.Close)
	l, err := postmark.NewLookup(postmark.LookupConfig{ServerToken: srv.Token, BaseURL: srv.URL, Timeout: 5 * time.Second, Window: httpprovider.Window{Settle: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	return bundle{srv: srv, p: provider(t, srv, srv.Token, 5*time.Second), l: l}
}

func provider(t *testing.T, srv *postmarktest.Server, token string, timeout time.Duration) *postmark.Provider {
	t.Helper()
	p, err := postmark.New(postmark.Config{Config: httpprovider.Config{Key: token, From: "orders@shop.example", BaseURL: srv.URL, Timeout: timeout}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestSendAndFind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := httpprovidertest.Message(1)
	id, err := b.p.Send(context.Background(), m, httpprovidertest.Pass)
	if err != nil {
		t.Fatal(err)
	}
	msgs := b.srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d e-mails, want 1", len(msgs))
	}
	got := msgs[0]
	if got.MessageID != id || got.To != m.To || got.From != "orders@shop.example" || got.TextBody != m.Text || got.HTMLBody != m.HTML ||
		got.Headers["Message-ID"] != "<"+m.MessageID+">" || got.Metadata[postmark.MetadataKey] != mail.KeyHash(m.IdempotencyKey) ||
		got.MessageStream != "outbound" {
		t.Errorf("sent %+v (id %s) for %+v", got, id, m)
	}
	found, ok, err := b.l.Find(context.Background(), httpprovidertest.Query(m, time.Now().Add(-2*time.Minute)))
	if err != nil || !ok || found != id {
		t.Errorf("Find = %q, %v, %v; want %q, true", found, ok, err, id)
	}
	if d := postmark.Descriptor; d.Dedup != 0 || d.Lookup == nil {
		t.Errorf("Postmark takes no key of ours, and is searched instead: %+v", d)
	}
}

// The connection is cut after Postmark took the message: ambiguous; the
// look-up finds it, so the reconciler records it as sent, not resent.
func TestAmbiguousSendIsFound(t *testing.T) {
	t.Parallel()
	for _, sent := range []bool{true, false} {
		b := setup(t)
		m := httpprovidertest.Message(2)
		b.srv.FailNext("/email", postmarktest.Fault{Cut: true, Sent: sent})
		_, err := b.p.Send(context.Background(), m, httpprovidertest.Pass)
		se := httpprovidertest.SendError(t, err)
		if se.Outcome != mail.OutcomeAmbiguous || !se.HandedOver {
			t.Fatalf("cut after the request: %v, want ambiguous, handed over", err)
		}
		_, ok, err := b.l.Find(context.Background(), httpprovidertest.Query(m, time.Now().Add(-2*time.Minute)))
		if err != nil || ok != sent {
			t.Errorf("sent=%v: Find found %v, %v", sent, ok, err)
		}
	}
}

func TestHandOverRefusedSendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	httpprovidertest.RefusedHandOverSendsNothing(t, b.p, httpprovidertest.Message(3), func() int { return b.srv.Requests("/email") })
}

func TestStallAfterHandOverSendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := provider(t, b.srv, b.srv.Token, 100*time.Millisecond)
	httpprovidertest.StallAfterHandOverSendsNothing(t, p, httpprovidertest.Message(4), 200*time.Millisecond, func() int { return b.srv.Requests("/email") })
}

func TestErrorsAreClassified(t *testing.T) {
	t.Parallel()
	cases := []struct {
		fault   postmarktest.Fault
		outcome mail.Outcome
		stage   mail.Stage
	}{
		{postmarktest.Fault{Status: 401, ErrorCode: 10, Message: "Bad or missing API token"}, mail.OutcomeUnavailable, mail.StageAuth},
		{postmarktest.Fault{Status: 422, ErrorCode: 10, Message: "Bad or missing API token"}, mail.OutcomeUnavailable, mail.StageAuth},
		{postmarktest.Fault{Status: 422, ErrorCode: 100, Message: "Maintenance"}, mail.OutcomeUnavailable, mail.StageConnect},
		{postmarktest.Fault{Status: 422, ErrorCode: 300, Message: "Error parsing 'To': Illegal email address 'x'."}, mail.OutcomePermanent, mail.StageRecipient},
		{postmarktest.Fault{Status: 422, ErrorCode: 300, Message: "Error parsing 'From': Illegal email address 'x'."}, mail.OutcomeUnavailable, mail.StageSender},
		{postmarktest.Fault{Status: 422, ErrorCode: 300, Message: "Provide either email TextBody or HtmlBody or both."}, mail.OutcomeTemporary, mail.StageData},
		{postmarktest.Fault{Status: 422, ErrorCode: 400, Message: "Sender Signature not found"}, mail.OutcomeUnavailable, mail.StageSender},
		{postmarktest.Fault{Status: 422, ErrorCode: 401, Message: "Sender signature not confirmed"}, mail.OutcomeUnavailable, mail.StageSender},
		{postmarktest.Fault{Status: 422, ErrorCode: 402, Message: "Invalid JSON"}, mail.OutcomeUnavailable, mail.StageData},
		{postmarktest.Fault{Status: 422, ErrorCode: 403, Message: "Incompatible JSON"}, mail.OutcomeUnavailable, mail.StageData},
		{postmarktest.Fault{Status: 422, ErrorCode: 405, Message: "Not allowed to send"}, mail.OutcomeUnavailable, mail.StageAuth},
		{postmarktest.Fault{Status: 422, ErrorCode: 406, Message: "Inactive recipient"}, mail.OutcomePermanent, mail.StageRecipient},
		{postmarktest.Fault{Status: 422, ErrorCode: 409, Message: "JSON required"}, mail.OutcomeUnavailable, mail.StageData},
		{postmarktest.Fault{Status: 422, ErrorCode: 410, Message: "Too many batch messages"}, mail.OutcomeUnavailable, mail.StageData},
		{postmarktest.Fault{Status: 422, ErrorCode: 411, Message: "Forbidden attachment type"}, mail.OutcomeTemporary, mail.StageData},
		{postmarktest.Fault{Status: 422, ErrorCode: 412, Message: "Account is Pending"}, mail.OutcomeUnavailable, mail.StageSender},
		{postmarktest.Fault{Status: 422, ErrorCode: 413, Message: "Account May Not Send"}, mail.OutcomeUnavailable, mail.StageAuth},
		{postmarktest.Fault{Status: 422, ErrorCode: 429, Message: "Rate Limit Exceeded"}, mail.OutcomeThrottled, mail.StageConnect},
		{postmarktest.Fault{Status: 422, ErrorCode: 1235, Message: "The message stream for the provided 'MessageStream' was not found."}, mail.OutcomeUnavailable, mail.StageSender},
		{postmarktest.Fault{Status: 422, ErrorCode: 9999, Message: "Something new"}, mail.OutcomeTemporary, mail.StageData},
		{postmarktest.Fault{Status: 429, ErrorCode: 429, Message: "Rate Limit Exceeded"}, mail.OutcomeThrottled, mail.StageConnect},
		{postmarktest.Fault{Status: 403, Body: "<html>403 Forbidden</html>"}, mail.OutcomeUnavailable, mail.StageConnect},
		{postmarktest.Fault{Status: 413, Body: "Payload Too Large"}, mail.OutcomeTemporary, mail.StageData},
		{postmarktest.Fault{Status: 503, Body: "Service Unavailable"}, mail.OutcomeAmbiguous, mail.StageData},
		{postmarktest.Fault{Status: 500, ErrorCode: 0, Message: "Internal Server Error"}, mail.OutcomeAmbiguous, mail.StageData},
		{postmarktest.Fault{Status: 504, Body: "Gateway Timeout"}, mail.OutcomeAmbiguous, mail.StageData},
	}
	b := setup(t)
	for _, c := range cases {
		b.srv.FailNext("/email", c.fault)
		_, err := b.p.Send(context.Background(), httpprovidertest.Message(5), httpprovidertest.Pass)
		se := httpprovidertest.SendError(t, err)
		if se.Outcome != c.outcome || se.Stage != c.stage || se.Reply.Code != c.fault.Status || !se.HandedOver {
			t.Errorf("%+v: %s at %s (code %d), want %s at %s", c.fault, se.Outcome, se.Stage, se.Reply.Code, c.outcome, c.stage)
		}
	}
	if n := len(b.srv.Messages()); n != 0 {
		t.Errorf("%d e-mails on error answers", n)
	}
}

// The server's own refusals, not injected.
func TestRefusalsOfTheServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := provider(t, b.srv, "wrong", 5*time.Second).Send(context.Background(), httpprovidertest.Message(6), httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeUnavailable || se.Stage != mail.StageAuth || se.Reply.Code != 401 {
		t.Errorf("wrong token: %v", err)
	}
	b.srv.Deactivate("budi@example.com")
	_, err = b.p.Send(context.Background(), httpprovidertest.Message(6), httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomePermanent || se.Stage != mail.StageRecipient {
		t.Errorf("inactive recipient: %v, want permanent", err)
	}
	b.srv.SetSenderSignatures("other.example")
	m := httpprovidertest.Message(6)
	m.To = "ani@example.com"
	_, err = b.p.Send(context.Background(), m, httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeUnavailable || se.Stage != mail.StageSender {
		t.Errorf("no sender signature: %v, want unavailable at sender", err)
	}
	p, err := postmark.New(postmark.Config{Config: httpprovider.Config{Key: b.srv.Token, From: "orders@shop.example", BaseURL: b.srv.URL}, MessageStream: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	b.srv.SetSenderSignatures()
	_, err = p.Send(context.Background(), m, httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeUnavailable {
		t.Errorf("unknown stream: %v, want unavailable", err)
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
	l, err := postmark.NewLookup(postmark.LookupConfig{ServerToken: b.srv.Token, BaseURL: b.srv.URL, Timeout: 5 * time.Second, Window: httpprovider.Window{Settle: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	httpprovidertest.UnreachableIsUnavailable(t, provider(t, b.srv, b.srv.Token, 5*time.Second), l, httpprovidertest.Message(7))
}

func TestProbe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.p.Probe(context.Background()); err != nil {
		t.Errorf("probe: %v", err)
	}
	err := provider(t, b.srv, "wrong", time.Second).Probe(context.Background())
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeUnavailable {
		t.Errorf("probe with a wrong token: %v", err)
	}
	if n := b.srv.Requests("/email"); n != 0 {
		t.Errorf("the probe sent %d e-mails", n)
	}
}

// A look-up never turns "cannot tell" into "not there".
func TestFindNeverGuesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := httpprovidertest.Message(8)
	old := time.Now().Add(-time.Hour)
	for _, f := range [][]postmarktest.Fault{
		{{Status: 429, ErrorCode: 429, Message: "Rate Limit Exceeded"}},
		{{Status: 500, Message: "Internal Server Error"}},
		{{Status: 503, Body: "<html>maintenance</html>"}},
		{{Status: 401, ErrorCode: 10, Message: "Bad token"}},
		{{Status: 200, Body: "<html>a captive portal</html>"}},
	} {
		b.srv.FailNext("/messages/outbound", f...)
		if _, found, err := b.l.Find(context.Background(), httpprovidertest.Query(m, old)); err == nil || found {
			t.Errorf("%+v: found=%v err=%v, want an error", f, found, err)
		}
	}
	// A cut connection (a fresh one: net/http retries a GET cut on a
	// kept one, and that retry's answer would count).
	fresh, err := postmark.NewLookup(postmark.LookupConfig{ServerToken: b.srv.Token, BaseURL: b.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	b.srv.FailNext("/messages/outbound", postmarktest.Fault{Cut: true})
	if _, found, err := fresh.Find(context.Background(), httpprovidertest.Query(m, old)); err == nil || found {
		t.Errorf("cut: found=%v err=%v, want an error", found, err)
	}
	// Outside the retention: an error, without asking.
	before := b.srv.Requests("/messages/outbound")
	_, _, err = b.l.Find(context.Background(), httpprovidertest.Query(m, time.Now().Add(-46*24*time.Hour)))
	if !errors.Is(err, postmark.ErrOutsideRetention) || b.srv.Requests("/messages/outbound") != before {
		t.Errorf("46 days ago: %v, want ErrOutsideRetention without a request", err)
	}
	// Too recent: a miss is not believed; a hit is.
	b.srv.SetSearchDelay(time.Hour)
	id, err := b.p.Send(context.Background(), m, httpprovidertest.Pass)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.l.Find(context.Background(), httpprovidertest.Query(m, time.Now())); !errors.Is(err, postmark.ErrTooRecent) {
		t.Errorf("just sent, not yet searchable: %v, want ErrTooRecent", err)
	}
	if _, _, err := b.l.Find(context.Background(), httpprovidertest.Query(m, time.Time{})); err == nil {
		t.Error("no hand-over time: a miss was believed")
	}
	b.srv.SetSearchDelay(0)
	if got, ok, err := b.l.Find(context.Background(), httpprovidertest.Query(m, time.Now())); err != nil || !ok || got != id {
		t.Errorf("just sent, searchable: %q %v %v", got, ok, err)
	}
	// Settled and inside the retention: not there is not there.
	if _, ok, err := b.l.Find(context.Background(), httpprovidertest.Query(httpprovidertest.Message(9), old)); err != nil || ok {
		t.Errorf("never sent: found=%v err=%v, want not found", ok, err)
	}
}

// The search filter may match more than our key; Find pages through and
// checks each message.
func TestFindPagesAndChecks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := httpprovidertest.Message(10)
	hash := mail.KeyHash(m.IdempotencyKey)
	id := b.srv.Add(postmarktest.Message{To: m.To, Metadata: map[string]string{postmark.MetadataKey: hash}, ReceivedAt: time.Now().Add(-2 * time.Hour)})
	for i := range 250 { // newer look-alikes, listed first
		b.srv.Add(postmarktest.Message{To: m.To, Metadata: map[string]string{postmark.MetadataKey: hash + fmt.Sprintf("-%d", i)}, ReceivedAt: time.Now().Add(-time.Hour)})
	}
	got, ok, err := b.l.Find(context.Background(), httpprovidertest.Query(m, time.Now().Add(-2*time.Hour)))
	if err != nil || !ok || got != id {
		t.Errorf("Find = %q %v %v, want %q", got, ok, err, id)
	}
	if n := b.srv.Requests("/messages/outbound"); n != 3 {
		t.Errorf("%d search requests, want 3 pages", n)
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	t.Parallel()
	err := postmark.Config{Config: httpprovider.Config{BaseURL: "ftp://x", Timeout: -1}, MessageStream: "a b"}.Validate()
	for _, want := range []string{"POSTMARK_SERVER_TOKEN", "MAIL_FROM", "POSTMARK_BASE_URL", "POSTMARK_MESSAGE_STREAM", "PROVIDER_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %s", err, want)
		}
	}
	err = postmark.LookupConfig{ServerToken: "t", Window: httpprovider.Window{Retention: 400 * 24 * time.Hour, Settle: -1}}.Validate()
	for _, want := range []string{"POSTMARK_RETENTION", "POSTMARK_LOOKUP_SETTLE"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LookupConfig.Validate() = %v, want it to name %s", err, want)
		}
	}
}

// A template's sender name and Reply-To reach Postmark, with
// Auto-Submitted.
func TestSenderIdentity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p, err := postmark.New(postmark.Config{Config: httpprovider.Config{Key: b.srv.Token, From: "Toko Ana <orders@shop.example>", BaseURL: b.srv.URL, Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	m := httpprovidertest.Message(1)
	m.FromName, m.ReplyTo = "Toko Büdi", "cs@shop.example"
	if _, err := p.Send(context.Background(), m, httpprovidertest.Pass); err != nil {
		t.Fatal(err)
	}
	got := b.srv.Messages()[0]
	if got.From != "Toko Büdi <orders@shop.example>" || got.ReplyTo != "cs@shop.example" || got.Headers["Auto-Submitted"] != "auto-generated" {
		t.Errorf("from %q, reply-to %q, headers %v", got.From, got.ReplyTo, got.Headers)
	}
}
