package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
	"github.com/sekali-dev/sekali/internal/worker/workertest"
)

// A worker keeps the template versions it loaded when it starts, and
// its hand-over records what the message was: the subject that went
// out, its language and the version that rendered it. The operator
// renders that version again, as the message was.
func TestHandOverRecordsWhatWasSent(t *testing.T) {
	t.Parallel()
	e := setup(t, smtpsink.Config{})
	ctx := context.Background()
	workertest.Serve(t, e.worker(t, workerOpts{}).Worker, worker.ServerConfig{Redis: e.redis.Opt})
	d := e.checkout(t, "ana@example.com")
	testenv.WaitFor(t, "the confirmation sent", 30*time.Second, func() bool {
		return e.delivery(t, d.IdempotencyKey).Status == notify.StatusSent
	})
	d, events, err := e.ops.Get(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.templates.RenderLocale(d.Template, d.Data, d.Locale)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := notify.LastHandOver(events)
	if !ok || h.Provider != "smtp" || h.Subject != want.Subject || h.Language != want.Language || h.Version != e.templates.Version(d.Template) {
		t.Fatalf("the hand-over recorded %+v (found %v); want smtp, subject %q, language %s, version %s",
			h, ok, want.Subject, want.Language, e.templates.Version(d.Template))
	}
	if got := e.sink.ByRecipient("ana@example.com"); len(got) != 1 || got[0].Header.Get("Subject") == "" {
		t.Fatalf("the sink holds %d messages to ana@example.com", len(got))
	}
	again, err := e.ops.SentEmail(ctx, d, h)
	if err != nil || again.Subject != want.Subject || again.HTML != want.HTML {
		t.Errorf("the version rendered again: %q, %v; want the message as it was", again.Subject, err)
	}
}
