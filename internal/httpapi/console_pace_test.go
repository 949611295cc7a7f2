package httpapi_test

import (
	"context"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/pace"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// A paced provider's budget is on the overview, from the budget every
// worker shares: the provider refused us for pace (a 429 saying its
// limit and a pause, read as the worker reads one), and the overview
// says so where the provider is, with its words and until when, beside
// the rate the workers are configured to, the lower one in force and the
// quota spent. GET /admin/v1/queue says the same. The page stays within
// the console's policy and passes the Nu Html Checker.
func TestConsoleOverviewShowsThePace(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	rdb := redisconn.NewClient(s.redis.Opt)
	t.Cleanup(func() { rdb.Close() })
	budget, err := pace.New(rdb, s.redis.Queue, "smtp", pace.Config{Rate: 4, Burst: 2, Quota: 1000})
	if err != nil {
		t.Fatal(err)
	}
	s.startPacedWorker(t, nil, smtpsink.Config{}, budget)
	if turn, err := budget.Take(ctx, pace.Urgent, 3); err != nil || !turn.Go() { // one request of three messages
		t.Fatalf("take: %+v, %v", turn, err)
	}
	refusal := pace.FromHTTP(http.StatusTooManyRequests, http.Header{"Retry-After": {"600"}, "Ratelimit-Limit": {"2"}}, time.Now())
	if err := budget.Observe(ctx, refusal); err != nil {
		t.Fatal(err)
	}

	br, _ := s.operator(t, "Ana")
	var page string
	var h http.Header
	testenv.WaitFor(t, "the worker to publish its provider's pace", 10*time.Second, func() bool {
		_, h, page = br.do(http.MethodGet, "/admin/", nil)
		return strings.Contains(page, `id="pace-smtp"`)
	})
	row := regexp.MustCompile(`<tr id="pace-smtp">(.*?)</tr>`).FindStringSubmatch(page)
	if row == nil {
		t.Fatalf("no row of smtp's pace:\n%s", page)
	}
	cells := regexp.MustCompile(`<td[^>]*>(.*?)</td>`).FindAllStringSubmatch(row[1], -1)
	text := func(i int) string {
		return html.UnescapeString(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(cells[i][1], ""))
	}
	if len(cells) != 5 {
		t.Fatalf("smtp's pace has %d cells: %s", len(cells), row[1])
	}
	if got := text(1); got != "4/s, burst 2" {
		t.Errorf("configured: %q, want 4/s, burst 2", got)
	}
	if got := text(2); !strings.HasPrefix(got, "2/s, the provider's limit (until ") {
		t.Errorf("in force: %q, want the provider's 2/s and until when", got)
	}
	paused := regexp.MustCompile(`^paused until \d\d:\d\d:\d\d UTC \((9|10) min left\): (.*)$`).FindStringSubmatch(text(3))
	if paused == nil || paused[2] != refusal.Reason || !strings.Contains(paused[2], "retry-after: 600") {
		t.Errorf("paused: %q, want until when, about 10 min left, and the provider's words %q", text(3), refusal.Reason)
	}
	if got := text(4); got != "3 of 1,000 (0%) in 24 h" {
		t.Errorf("quota: %q, want 3 of 1,000 (0%%) in 24 h", got)
	}
	if !regexp.MustCompile(`<div class="note down">smtp: paused for pace until \d\d:\d\d:\d\d UTC`).MatchString(page) {
		t.Errorf("the provider's card does not say it is paused for pace:\n%s", page)
	}
	for _, refused := range []string{"style=", "<style", "<script"} {
		if strings.Contains(page, refused) {
			t.Errorf("the overview has %s, which its policy refuses (%s)", refused, h.Get("Content-Security-Policy"))
		}
	}
	testenv.CheckHTML(t, map[string]string{"the overview with a paced provider": page})

	var q struct {
		Provider notify.ProviderHealth `json:"provider"`
	}
	s.admin(t, http.MethodGet, "/admin/v1/queue", "").decode(t, &q)
	if len(q.Provider.Providers) != 1 || q.Provider.Providers[0].Pace == nil {
		t.Fatalf("the admin API's providers: %+v, want smtp with its pace", q.Provider.Providers)
	}
	p := *q.Provider.Providers[0].Pace
	if p.Rate != 4 || p.Burst != 2 || p.Quota != 1000 || p.EffectiveRate != 2 || p.QuotaUsed != 3 || p.PauseReason != refusal.Reason ||
		time.Until(p.PausedUntil) < 9*time.Minute || time.Until(p.PausedUntil) > 10*time.Minute || p.ConfigsDiffer || p.Error != "" {
		t.Errorf("the admin API's pace of smtp: %+v", p)
	}
	if w := q.Provider.Workers; len(w) != 1 || w[0].Pace == nil || *w[0].Pace != (notify.PaceConfig{Rate: 4, Burst: 2, Quota: 1000}) {
		t.Errorf("the worker's published pace: %+v", w)
	}
}
