package mailgun_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailgun"
	"github.com/sekali-dev/sekali/internal/mailgun/mailguntest"
	"github.com/sekali-dev/sekali/internal/testenv"
)

var (
	_ mail.Provider = (*mailgun.Provider)(nil)
	_ mail.Lookup   = (*mailgun.Lookup)(nil)
)

const domain = "mg.shop.example"

type bundle struct {
	srv *mailguntest.Server
	p   *mailgun.Provider
	l   *mailgun.Lookup
}

func setup(t *testing.T) bundle {
	t.Helper()
	srv := mailguntest.NewServer(domain)
	t.Cleanup(srv.Close)
	return bundle{srv: srv, p: provider(t, srv, srv.APIKey, 5*time.Second), l: lookup(t, srv)}
}

func provider(t *testing.T, srv *mailguntest.Server, key string, timeout time.Duration) *mailgun.Provider {
	t.Helper()
	p, err := mailgun.New(mailgun.Config{Config: httpprovider.Config{Key: key, From: "orders@shop.example", BaseURL: srv.URL, Timeout: timeout}, Domain: domain})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func lookup(t *testing.T, srv *mailguntest.Server) *mailgun.Lookup {
	t.Helper()
	l, err := mailgun.NewLookup(mailgun.Config{Config: httpprovider.Config{Key: srv.APIKey, BaseURL: srv.URL, Window: httpprovider.Window{Settle: time.Minute}}, Domain: domain})
	if err != nil {
		t.Fatal(err)
	}
	return l
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
	if id != m.MessageID || got.ID != m.MessageID || got.To != m.To || got.From != "orders@shop.example" || got.Text != m.Text ||
		got.HTML != m.HTML || got.Subject != m.Subject || got.UserVariables[mailgun.VariableKey] != mail.KeyHash(m.IdempotencyKey) {
		t.Errorf("sent %+v, id %q, for %+v", got, id, m)
	}
	// Within the settle margin a hit counts, and later too.
	for _, at := range []time.Time{time.Now(), time.Now().Add(-2 * time.Minute)} {
		found, ok, err := b.l.Find(context.Background(), httpprovidertest.Query(m, at))
		if err != nil || !ok || found != m.MessageID {
			t.Errorf("Find = %q %v %v, want %q", found, ok, err, m.MessageID)
		}
	}
	if d := mailgun.Descriptor; d.Dedup != 0 || d.Lookup == nil {
		t.Errorf("Mailgun takes no key of ours, and is searched instead: %+v", d)
	}
}

func TestAmbiguousSendIsFound(t *testing.T) {
	t.Parallel()
	for _, sent := range []bool{true, false} {
		b := setup(t)
		m := httpprovidertest.Message(2)
		b.srv.FailNext("messages", mailguntest.Fault{Cut: true, Sent: sent})
		_, err := b.p.Send(context.Background(), m, httpprovidertest.Pass)
		if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeAmbiguous || !se.HandedOver {
			t.Fatalf("cut after the request: %v, want ambiguous, handed over", err)
		}
		b.srv.AddEvent(mailguntest.Event{Event: "accepted", MessageID: "someone-else@shop.example", Timestamp: time.Now()})
		_, ok, err := b.l.Find(context.Background(), httpprovidertest.Query(m, time.Now().Add(-2*time.Minute)))
		if err != nil || ok != sent {
			t.Errorf("sent=%v: Find found %v, %v", sent, ok, err)
		}
	}
}

func TestHandOverRefusedSendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	httpprovidertest.RefusedHandOverSendsNothing(t, b.p, httpprovidertest.Message(3), func() int { return b.srv.Requests("messages") })
}

func TestStallAfterHandOverSendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := provider(t, b.srv, b.srv.APIKey, 100*time.Millisecond)
	httpprovidertest.StallAfterHandOverSendsNothing(t, p, httpprovidertest.Message(4), 200*time.Millisecond, func() int { return b.srv.Requests("messages") })
}

func TestErrorsAreClassified(t *testing.T) {
	t.Parallel()
	cases := []struct {
		fault   mailguntest.Fault
		outcome mail.Outcome
		stage   mail.Stage
	}{
		{mailguntest.Fault{Status: 401, Message: "Forbidden", Raw: true}, mail.OutcomeUnavailable, mail.StageAuth},
		{mailguntest.Fault{Status: 403, Message: "Sandbox subdomains are for test purposes only."}, mail.OutcomeUnavailable, mail.StageAuth},
		{mailguntest.Fault{Status: 402, Message: "Payment required"}, mail.OutcomeUnavailable, mail.StageAuth},
		{mailguntest.Fault{Status: 404, Message: "Domain not found: mg.shop.example"}, mail.OutcomeUnavailable, mail.StageSender},
		{mailguntest.Fault{Status: 429, Message: "Too many requests"}, mail.OutcomeThrottled, mail.StageConnect},
		{mailguntest.Fault{Status: 503, Message: "Service unavailable", Raw: true}, mail.OutcomeAmbiguous, mail.StageData},
		{mailguntest.Fault{Status: 500, Message: "Internal error"}, mail.OutcomeAmbiguous, mail.StageData},
		{mailguntest.Fault{Status: 502, Message: "<html>Bad Gateway</html>", Raw: true}, mail.OutcomeAmbiguous, mail.StageData},
		{mailguntest.Fault{Status: 400, Message: "'to' parameter is not a valid address. please check documentation"}, mail.OutcomePermanent, mail.StageRecipient},
		{mailguntest.Fault{Status: 400, Message: "'from' parameter is not a valid address. please check documentation"}, mail.OutcomeUnavailable, mail.StageSender},
		{mailguntest.Fault{Status: 400, Message: "from parameter is missing"}, mail.OutcomeUnavailable, mail.StageSender},
		{mailguntest.Fault{Status: 400, Message: "Need at least one of 'text', 'html' or 'template' parameters specified"}, mail.OutcomeTemporary, mail.StageData},
		{mailguntest.Fault{Status: 413, Message: "Request Entity Too Large", Raw: true}, mail.OutcomeTemporary, mail.StageData},
	}
	b := setup(t)
	for _, c := range cases {
		b.srv.FailNext("messages", c.fault)
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

func TestRefusalsOfTheServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := provider(t, b.srv, "key-wrong", 5*time.Second).Send(context.Background(), httpprovidertest.Message(6), httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeUnavailable || se.Stage != mail.StageAuth || se.Reply.Code != 401 {
		t.Errorf("wrong key: %v", err)
	}
	p, err := mailgun.New(mailgun.Config{Config: httpprovider.Config{Key: b.srv.APIKey, From: "orders@shop.example", BaseURL: b.srv.URL}, Domain: "mg.other.example"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Send(context.Background(), httpprovidertest.Message(6), httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeUnavailable || se.Reply.Code != 404 {
		t.Errorf("unknown domain (another region?): %v", err)
	}
	if err := p.Probe(context.Background()); err == nil {
		t.Error("probe of an unknown domain passed")
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
	httpprovidertest.UnreachableIsUnavailable(t, provider(t, b.srv, b.srv.APIKey, 5*time.Second), lookup(t, b.srv), httpprovidertest.Message(7))
}

func TestProbe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.p.Probe(context.Background()); err != nil {
		t.Errorf("probe: %v", err)
	}
	if err := provider(t, b.srv, "key-wrong", time.Second).Probe(context.Background()); err == nil {
		t.Error("probe with a wrong key passed")
	}
	if n := b.srv.Requests("messages"); n != 0 {
		t.Errorf("the probe sent %d e-mails", n)
	}
}

func TestFindNeverGuesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := httpprovidertest.Message(8)
	old := time.Now().Add(-time.Hour)
	for _, f := range []mailguntest.Fault{
		{Status: 429, Message: "Too many requests"},
		{Status: 500, Message: "Internal error"},
		{Status: 404, Message: "Domain not found"},
		{Status: 401, Message: "Forbidden", Raw: true},
		{Status: 200, Message: "<html>a captive portal</html>", Raw: true},
	} {
		b.srv.FailNext("events", f)
		if _, found, err := b.l.Find(context.Background(), httpprovidertest.Query(m, old)); err == nil || found {
			t.Errorf("%+v: found=%v err=%v, want an error", f, found, err)
		}
	}
	fresh := lookup(t, b.srv) // a fresh connection: net/http retries a GET cut on a kept one
	b.srv.FailNext("events", mailguntest.Fault{Cut: true})
	if _, found, err := fresh.Find(context.Background(), httpprovidertest.Query(m, old)); err == nil || found {
		t.Errorf("cut: found=%v err=%v, want an error", found, err)
	}
	before := b.srv.Requests("events")
	if _, _, err := b.l.Find(context.Background(), httpprovidertest.Query(m, time.Now().Add(-4*24*time.Hour))); !errors.Is(err, mailgun.ErrOutsideRetention) || b.srv.Requests("events") != before {
		t.Errorf("4 days ago: %v, want ErrOutsideRetention without a request", err)
	}
	// Events reach storage late: a miss within the settle margin is not
	// believed, and neither is one without a hand-over time.
	b.srv.SetEventDelay(time.Hour)
	if _, err := b.p.Send(context.Background(), m, httpprovidertest.Pass); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.l.Find(context.Background(), httpprovidertest.Query(m, time.Now())); !errors.Is(err, mailgun.ErrTooRecent) {
		t.Errorf("sent, events not yet stored: %v, want ErrTooRecent", err)
	}
	if _, _, err := b.l.Find(context.Background(), httpprovidertest.Query(m, time.Time{})); err == nil {
		t.Error("no hand-over time: a miss was believed")
	}
	b.srv.SetEventDelay(0)
	if _, ok, err := b.l.Find(context.Background(), httpprovidertest.Query(httpprovidertest.Message(9), old)); err != nil || ok {
		t.Errorf("never sent: found=%v err=%v, want not found", ok, err)
	}
	// A rejected event is no acceptance.
	b.srv.AddEvent(mailguntest.Event{Event: "rejected", MessageID: httpprovidertest.Message(10).MessageID, Timestamp: old})
	if _, ok, err := b.l.Find(context.Background(), httpprovidertest.Query(httpprovidertest.Message(10), old)); err != nil || ok {
		t.Errorf("rejected only: found=%v err=%v, want not found", ok, err)
	}
}

// Find follows paging.next until an empty page.
func TestFindPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := httpprovidertest.Message(11)
	start := time.Now().Add(-2 * time.Hour)
	for i := range 650 { // refusals first: they do not count
		b.srv.AddEvent(mailguntest.Event{Event: "rejected", MessageID: m.MessageID, Timestamp: start.Add(time.Duration(i) * time.Millisecond)})
	}
	if _, ok, err := b.l.Find(context.Background(), httpprovidertest.Query(m, start)); err != nil || ok {
		t.Fatalf("only refusals: %v %v", ok, err)
	}
	if n := b.srv.Requests("events"); n != 4 {
		t.Errorf("%d pages read, want 4 (300, 300, 50, empty)", n)
	}
	b.srv.AddEvent(mailguntest.Event{Event: "delivered", MessageID: m.MessageID, Timestamp: start.Add(time.Second)})
	got, ok, err := b.l.Find(context.Background(), httpprovidertest.Query(m, start))
	if err != nil || !ok || got != m.MessageID {
		t.Errorf("Find = %q %v %v", got, ok, err)
	}
	if n := b.srv.Requests("events"); n != 4+3 {
		t.Errorf("%d pages read, want 3 more", n-4)
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	t.Parallel()
	err := mailgun.Config{Config: httpprovider.Config{Key: "a:b", BaseURL: "http://api.mailgun.net", Timeout: -1}, Domain: "localhost"}.Validate()
	for _, want := range []string{"MAILGUN_API_KEY", "MAILGUN_DOMAIN", "MAIL_FROM", "MAILGUN_BASE_URL", "PROVIDER_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %s", err, want)
		}
	}
	ok := mailgun.Config{Config: httpprovider.Config{Key: "key", From: "orders@shop.example", BaseURL: mailgun.EUBaseURL}, Domain: domain}
	if err := ok.Validate(); err != nil {
		t.Errorf("EU: %v", err)
	}
}

// A template's sender name and Reply-To reach Mailgun, with
// Auto-Submitted.
func TestSenderIdentity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p, err := mailgun.New(mailgun.Config{Config: httpprovider.Config{Key: b.srv.APIKey, From: "Toko Ana <orders@shop.example>", BaseURL: b.srv.URL, Timeout: 5 * time.Second}, Domain: domain})
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
	if got.From != "Toko Büdi <orders@shop.example>" || got.Headers["Reply-To"] != "cs@shop.example" || got.Headers["Auto-Submitted"] != "auto-generated" {
		t.Errorf("from %q, headers %v", got.From, got.Headers)
	}
}

// Mailgun's rate limit, from the stand-in: throttled, nothing taken.
func TestRateLimitOfTheServerIsThrottled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetRateLimit(1)
	if _, err := b.p.Send(context.Background(), httpprovidertest.Message(30), httpprovidertest.Pass); err != nil {
		t.Fatal(err)
	}
	_, err := b.p.Send(context.Background(), httpprovidertest.Message(31), httpprovidertest.Pass)
	if se := httpprovidertest.SendError(t, err); se.Outcome != mail.OutcomeThrottled || se.Reply.Code != 429 || se.MayHaveAccepted() || !se.HandedOver {
		t.Errorf("over the rate: %v, want throttled 429, nothing taken", err)
	}
	if n, refused := len(b.srv.Messages()), b.srv.RateLimited(); n != 1 || refused != 1 {
		t.Errorf("%d e-mails, %d refused by rate; want 1 and 1", n, refused)
	}
}
