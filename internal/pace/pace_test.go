package pace

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// setup gives a test a queue of its own in the shared Redis, and makes
// budgets over it as worker processes would: each with its own client.
type bundle struct {
	rd     testenv.Redis
	budget func(name string, cfg Config) *Budget
	rdb    redis.UniversalClient // a client of the test's own, for Redis' clock
}

func setup(t *testing.T) bundle {
	t.Helper()
	rd := testenv.NewRedis(t)
	return bundle{rd: rd, budget: budgetsOver(t, rd.Opt, rd.Queue), rdb: client(t, rd.Opt)}
}

func client(t *testing.T, opt asynq.RedisConnOpt) redis.UniversalClient {
	t.Helper()
	rdb := redisconn.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func budgetsOver(t *testing.T, opt asynq.RedisConnOpt, queue string) func(string, Config) *Budget {
	return func(name string, cfg Config) *Budget {
		t.Helper()
		b, err := New(client(t, opt), queue, name, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// redisNow is Redis' clock, the one the budgets count on.
func redisNow(t *testing.T, rdb redis.UniversalClient) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

func take(t *testing.T, b *Budget, messages int) Turn {
	t.Helper()
	turn, err := b.Take(context.Background(), Urgent, messages)
	if err != nil {
		t.Fatal(err)
	}
	return turn
}

func observe(t *testing.T, b *Budget, s Signal) {
	t.Helper()
	if err := b.Observe(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func state(t *testing.T, b *Budget) State {
	t.Helper()
	s, err := b.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Two worker processes (two budgets, two clients) that take as fast as
// they are let share one rate: together they get at most what a GCRA of
// 5/s less the Headroom with a burst of 1 grants over the time Redis saw
// them take (burst + rate × span), and not much less, so the rate is
// reached, not just kept under. Separate budgets, or a burst that grew,
// would grant twice.
func TestRateIsSharedByProcesses(t *testing.T) {
	t.Parallel()
	s := setup(t)
	cfg := Config{Rate: 5}
	a, b := s.budget("resend", cfg), s.budget("resend", cfg)
	const run = 4 * time.Second
	var mu sync.Mutex
	granted := map[*Budget]int{}
	start := redisNow(t, s.rdb)
	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	for _, p := range []*Budget{a, b} {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				turn, err := p.Take(context.Background(), Urgent, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if turn.Go() {
					mu.Lock()
					granted[p]++
					mu.Unlock()
					continue
				}
				if turn.By != ByRate || turn.Wait > interval(5)+time.Millisecond {
					t.Errorf("held by %s for %s, want the rate's at most %s", turn.By, turn.Wait, interval(5))
				}
				time.Sleep(min(turn.Wait, time.Until(deadline))) // pacing, as a worker would wait
			}
		})
	}
	wg.Wait()
	span := redisNow(t, s.rdb).Sub(start)
	total := granted[a] + granted[b]
	most := 1 + int(math.Floor(5*(1-Headroom)*span.Seconds()))
	least := int(0.75 * 5 * run.Seconds())
	t.Logf("granted %d (%d + %d) over %s on Redis' clock: at most %d, at least %d", total, granted[a], granted[b], span, most, least)
	if total > most {
		t.Errorf("granted %d tokens in %s, more than the %d a shared 5/s budget allows", total, span, most)
	}
	if total < least {
		t.Errorf("granted %d tokens in %s, fewer than %d: the rate is not reached", total, run, least)
	}
	if granted[a] == 0 || granted[b] == 0 {
		t.Errorf("one process got nothing: %d and %d", granted[a], granted[b])
	}
}

// After a quiet spell, processes asking at once get Burst tokens between
// them, one by default: a burst above the provider's window is refused.
func TestBurstIsShared(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for _, burst := range []int{0, 3} {
		cfg := Config{Rate: 0.5, Burst: burst}
		name := fmt.Sprintf("smtp-%d", burst)
		a, b := s.budget(name, cfg), s.budget(name, cfg)
		went := 0
		for i := range 6 {
			if take(t, []*Budget{a, b}[i%2], 1).Go() {
				went++
			}
		}
		if want := max(burst, 1); went != want {
			t.Errorf("burst %d: %d of 6 requests at once went, want %d", burst, went, want)
		}
	}
}

// A pause one process writes holds the other at once; a shorter pause
// said later does not shorten it; it ends when it should, and then the
// budget goes again.
func TestPauseIsSharedAndTheLongestWins(t *testing.T) {
	t.Parallel()
	s := setup(t)
	cfg := Config{Rate: 100, Burst: 10}
	a, b := s.budget("resend", cfg), s.budget("resend", cfg)
	if turn := take(t, b, 1); !turn.Go() {
		t.Fatalf("a fresh budget said %+v", turn)
	}
	const pause = 1500 * time.Millisecond
	before := time.Now()
	observe(t, a, Signal{Pause: pause, Reason: "http 429, retry-after: 1"})
	turn := take(t, b, 1)
	if turn.By != ByPause || turn.Wait <= pause-300*time.Millisecond || turn.Wait > pause {
		t.Fatalf("the other process: %+v, want held by the pause for about %s", turn, pause)
	}
	observe(t, b, Signal{Pause: 100 * time.Millisecond, Reason: "shorter"})
	if turn := take(t, a, 1); turn.By != ByPause || turn.Wait <= pause-time.Since(before)-50*time.Millisecond {
		t.Fatalf("after a shorter pause: %+v, want the first pause's %s left", turn, pause-time.Since(before))
	}
	st := state(t, a)
	if st.PauseReason != "http 429, retry-after: 1" || st.PausedUntil.Before(before.Add(pause-50*time.Millisecond)) {
		t.Errorf("state: paused until %s for %q, want about %s for the first reason", st.PausedUntil, st.PauseReason, before.Add(pause))
	}
	var went time.Time
	testenv.WaitFor(t, "the pause to end", 5*time.Second, func() bool {
		went = time.Now()
		return take(t, b, 1).Go()
	})
	if elapsed := went.Sub(before); elapsed < pause-5*time.Millisecond {
		t.Errorf("the budget went %s after a pause of %s", elapsed, pause)
	}
	if st := state(t, a); !st.PausedUntil.IsZero() || st.PauseReason != "" {
		t.Errorf("after the pause: %+v", st)
	}
}

// A provider's ratelimit-limit below the configured rate, seen by one
// process, paces the other; a higher one ends it without raising the rate
// above the configuration.
func TestProviderLimitLowersTheRateForEveryone(t *testing.T) {
	t.Parallel()
	s := setup(t)
	cfg := Config{Rate: 10}
	a, b := s.budget("resend", cfg), s.budget("resend", cfg)
	// next is the wait after one token for the next: 1/rate, less the
	// headroom.
	next := func(p *Budget) time.Duration {
		t.Helper()
		var turn Turn
		testenv.WaitFor(t, "a token", 5*time.Second, func() bool { return take(t, p, 1).Go() })
		if turn = take(t, p, 1); turn.Go() || turn.By != ByRate {
			t.Fatalf("right after a token: %+v", turn)
		}
		return turn.Wait
	}
	if d := next(b); d > interval(10)+time.Millisecond {
		t.Fatalf("at 10/s the next token is %s away", d)
	}

	resend := http.Header{"Ratelimit-Limit": {"2"}, "Ratelimit-Remaining": {"1"}, "Ratelimit-Reset": {"1"}}
	observe(t, a, FromHTTP(http.StatusOK, resend, time.Now()))
	if st := state(t, b); st.Rate != 2 || time.Until(st.LearnedUntil) < LearnFor-time.Minute {
		t.Errorf("the other process: rate %v until %s, want 2 for about %s", st.Rate, st.LearnedUntil, LearnFor)
	}
	if d := next(b); d <= 250*time.Millisecond || d > interval(2)+time.Millisecond {
		t.Errorf("at the provider's 2/s the next token is %s away, want nearly %s", d, interval(2))
	}

	// b has read the lower rate; the provider now says more than the
	// configuration allows.
	observe(t, b, FromHTTP(http.StatusOK, http.Header{"Ratelimit-Limit": {"50"}, "Ratelimit-Remaining": {"49"}, "Ratelimit-Reset": {"1"}}, time.Now()))
	if st := state(t, a); st.Rate != 10 || !st.LearnedUntil.IsZero() {
		t.Errorf("after ratelimit-limit 50: rate %v until %s, want the configured 10", st.Rate, st.LearnedUntil)
	}
	if d := next(a); d > interval(10)+time.Millisecond {
		t.Errorf("after ratelimit-limit 50 the next token is %s away, want at most the configured %s", d, interval(10))
	}

	// A process configured lower than the rate another learned (a
	// deploy that lowers the configuration) keeps to its own.
	observe(t, a, Signal{Rate: 8})
	if st := state(t, s.budget("resend", Config{Rate: 5})); st.Rate != 5 {
		t.Errorf("a budget configured to 5/s reads %v/s", st.Rate)
	}
}

// A quota, once spent, holds every process until its window frees a
// message, and Take says how long; a request larger than the quota is
// refused outright.
func TestQuotaHoldsUntilTheWindowFrees(t *testing.T) {
	t.Parallel()
	s := setup(t)
	cfg := Config{Rate: 1000, Burst: 10, Quota: 3, QuotaWindow: time.Second}
	a, b := s.budget("ses", cfg), s.budget("ses", cfg)
	first := time.Now()
	if turn := take(t, a, 2); !turn.Go() {
		t.Fatalf("2 of 3: %+v", turn)
	}
	if turn := take(t, b, 1); !turn.Go() {
		t.Fatalf("3 of 3: %+v", turn)
	}
	if st := state(t, a); st.QuotaUsed != 3 || st.QuotaLeft != 0 {
		t.Errorf("state: used %d, left %d, want 3 and 0", st.QuotaUsed, st.QuotaLeft)
	}
	refused := time.Now()
	turn := take(t, b, 1)
	if turn.By != ByQuota || turn.Wait <= 0 || turn.Wait > time.Second+20*time.Millisecond {
		t.Fatalf("a 4th of 3: %+v, want held by the quota for at most its window and a slice", turn)
	}
	if _, err := a.Take(context.Background(), Urgent, 4); err == nil {
		t.Error("a request of 4 messages against a quota of 3 was not refused")
	}
	var went time.Time
	testenv.WaitFor(t, "the window to free a message", 5*time.Second, func() bool {
		went = time.Now()
		return take(t, a, 1).Go()
	})
	if went.Sub(first) < time.Second-5*time.Millisecond || went.Sub(refused) < turn.Wait-5*time.Millisecond {
		t.Errorf("went %s after the first message and %s after the refusal, which said %s: before the window freed it",
			went.Sub(first), went.Sub(refused), turn.Wait)
	}
	if st := state(t, b); st.QuotaUsed < 1 || st.QuotaUsed > 3 {
		t.Errorf("after the window: used %d", st.QuotaUsed)
	}
}

// While an urgent request waits for a token, in any process, the later
// lane is given none: it is told to wait (ByUrgent) for as long as the
// urgent one does and an interval more, for the next urgent request to
// ask; then it takes tokens again. An urgent request that did not wait
// holds nothing: the later lane shares a budget that is not scarce.
func TestLaterLaneYieldsToAWaitingUrgentRequest(t *testing.T) {
	t.Parallel()
	s := setup(t)
	cfg := Config{Rate: 5}
	shop, news := s.budget("resend", cfg), s.budget("resend", cfg) // two processes
	ctx := context.Background()
	lane := func(b *Budget, l Lane) Turn {
		t.Helper()
		turn, err := b.Take(ctx, l, 1)
		if err != nil {
			t.Fatal(err)
		}
		return turn
	}
	if turn := lane(shop, Urgent); !turn.Go() {
		t.Fatalf("the first urgent request: %+v", turn)
	}
	if turn := lane(news, Later); turn.By != ByRate {
		t.Fatalf("the later lane after an urgent request that did not wait: %+v, want the rate's wait only", turn)
	}
	waited := lane(shop, Urgent)
	if waited.By != ByRate {
		t.Fatalf("an urgent request before its token is due: %+v", waited)
	}
	held := lane(news, Later)
	if held.By != ByUrgent || held.Wait <= waited.Wait || held.Wait > waited.Wait+interval(5)+5*time.Millisecond {
		t.Fatalf("the later lane while an urgent request waits %s: %+v, want held for that and an interval (%s) more", waited.Wait, held, interval(5))
	}
	time.Sleep(waited.Wait)
	testenv.WaitFor(t, "the urgent request's token", time.Second, func() bool { return lane(shop, Urgent).Go() })
	if turn := lane(news, Later); turn.By != ByUrgent {
		t.Errorf("the later lane right after the urgent request went: %+v, want still held for the next urgent one", turn)
	}
	testenv.WaitFor(t, "the later lane's token", 2*time.Second, func() bool { return lane(news, Later).Go() })
}

// The gauges say what every process shares, from the first scrape.
func TestCollectorExportsTheState(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ses := s.budget("ses", Config{Rate: 14, Quota: 50, QuotaWindow: time.Hour})
	resend := s.budget("resend", Config{Rate: 2})
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(ses, resend))
	for _, want := range []struct {
		name, provider string
		value          float64
	}{
		{"sekali_provider_pace_rate", "ses", 14},
		{"sekali_provider_pace_effective_rate", "resend", 2},
		{"sekali_provider_pace_paused_seconds", "resend", 0},
		{"sekali_provider_pace_quota", "ses", 50},
		{"sekali_provider_pace_quota_remaining", "ses", 50},
	} {
		if !testenv.HasSeries(t, reg, want.name, "provider", want.provider) {
			t.Errorf("no %s{provider=%q} before anything happened", want.name, want.provider)
		} else if got := testenv.Metric(t, reg, want.name, "provider", want.provider); got != want.value {
			t.Errorf("%s{provider=%q} = %v, want %v", want.name, want.provider, got, want.value)
		}
	}
	take(t, ses, 3)
	observe(t, resend, Signal{Pause: time.Minute, Reason: "http 429"})
	observe(t, resend, Signal{Rate: 1})
	if got := testenv.Metric(t, reg, "sekali_provider_pace_quota_used", "provider", "ses"); got != 3 {
		t.Errorf("quota used %v, want 3", got)
	}
	if got := testenv.Metric(t, reg, "sekali_provider_pace_paused_seconds", "provider", "resend"); got < 50 || got > 60 {
		t.Errorf("paused %vs, want about 60", got)
	}
	if got := testenv.Metric(t, reg, "sekali_provider_pace_effective_rate", "provider", "resend"); got != 1 {
		t.Errorf("effective rate %v, want the provider's 1", got)
	}

	// A budget without a rate says no rate (the alerts' rules add the
	// providers' rates: a 0 would read as a provider that cannot send),
	// only its pauses.
	relay := s.budget("smtp", Config{})
	reg = prometheus.NewRegistry()
	reg.MustRegister(NewCollector(relay))
	for _, name := range []string{"sekali_provider_pace_rate", "sekali_provider_pace_effective_rate"} {
		if testenv.HasSeries(t, reg, name, "provider", "smtp") {
			t.Errorf("a budget without a rate exports %s", name)
		}
	}
	if !testenv.HasSeries(t, reg, "sekali_provider_pace_paused_seconds", "provider", "smtp") {
		t.Error("a budget without a rate exports no pause")
	}
}

// When Redis does not answer, Take, Observe and State return the error at
// once and no token: without Redis there is no shared count, and a
// worker cannot claim without it anyway. The gauges keep the
// configuration and leave out what only Redis knows.
func TestRedisDownIsAnError(t *testing.T) {
	t.Parallel()
	opt, err := redisconn.Parse(fmt.Sprintf("redis://127.0.0.1:%d/0", testenv.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	p := budgetsOver(t, opt, "test-down")("resend", Config{Rate: 2, Quota: 10})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if turn, err := p.Take(ctx, Urgent, 1); err == nil {
		t.Errorf("Take without Redis: %+v %v, want an error", turn, err)
	} else if !strings.Contains(err.Error(), "pace resend") {
		t.Errorf("Take's error does not say whose budget: %v", err)
	}
	if err := p.Observe(ctx, Signal{Pause: time.Second}); err == nil {
		t.Error("Observe without Redis: no error")
	}
	if _, err := p.State(ctx); err == nil {
		t.Error("State without Redis: no error")
	}
	if ctx.Err() != nil {
		t.Error("without Redis the calls waited for the context to end")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(p))
	if !testenv.HasSeries(t, reg, "sekali_provider_pace_rate", "provider", "resend") ||
		testenv.HasSeries(t, reg, "sekali_provider_pace_effective_rate", "provider", "resend") {
		t.Error("without Redis the gauges should keep the configured rate and leave out the effective one")
	}
}

// A Redis that loses its data (a restart without persistence) forgets a
// pause: the budget goes again, and the provider's next refusal pauses it
// again.
func TestRedisRestartForgetsThePause(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	p := budgetsOver(t, srv.Opt, srv.Queue)("resend", Config{Rate: 2})
	observe(t, p, Signal{Pause: time.Hour})
	if turn := take(t, p, 1); turn.By != ByPause {
		t.Fatalf("paused: %+v", turn)
	}
	srv.Restart(t)
	testenv.WaitFor(t, "the budget to go after the restart", 10*time.Second, func() bool {
		turn, err := p.Take(context.Background(), Urgent, 1)
		return err == nil && turn.Go()
	})
}

// On a Redis Cluster every key of a budget is in one slot (its commands
// of a round trip reach one node, and a script's keys must share one),
// and the budget works through the cluster client.
func TestBudgetOnARedisCluster(t *testing.T) {
	t.Parallel()
	c := testenv.NewRedisCluster(t)
	cfg := Config{Rate: 100, Burst: 2, Quota: 2, QuotaWindow: time.Minute}
	a, b := budgetsOver(t, c.Opt, c.Queue)("ses", cfg), budgetsOver(t, c.Opt, c.Queue)("ses", cfg)
	rdb := client(t, c.Opt)
	ctx := context.Background()
	slot := func(key string) int64 {
		n, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, key := range []string{a.pause, a.limit, a.quota, a.urgent, "rate:" + a.depart} {
		if slot(key) != slot("rate:"+a.key) {
			t.Errorf("%s is in slot %d, the GCRA's rate:%s in %d", key, slot(key), a.key, slot("rate:"+a.key))
		}
	}
	if turn := take(t, a, 2); !turn.Go() {
		t.Fatalf("take: %+v", turn)
	}
	if turn := take(t, b, 1); turn.By != ByQuota {
		t.Errorf("past the quota: %+v", turn)
	}
	observe(t, a, Signal{Pause: time.Minute, Rate: 10, Reason: "http 429"})
	if st := state(t, b); st.Rate != 10 || st.PauseReason != "http 429" || st.QuotaUsed != 2 {
		t.Errorf("state through the cluster: %+v", st)
	}
}

// New refuses a configuration that cannot pace, saying every problem.
func TestNewRefusesWhatCannotPace(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never reached
	t.Cleanup(func() { rdb.Close() })
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"resend", Config{Rate: 0.0001}, "rate 0.0001"},
		{"resend", Config{Rate: -1}, "rate -1"},
		{"resend", Config{Rate: math.NaN()}, "rate NaN"},
		{"resend", Config{Rate: math.Inf(1)}, "rate +Inf"},
		{"resend", Config{Rate: 2, Burst: -1}, "burst -1"},
		{"ses", Config{Rate: 2, Quota: -1}, "quota -1"},
		{"ses", Config{Rate: 2, Quota: 10, QuotaWindow: time.Millisecond}, "quota 10 per 1ms"},
		{"", Config{Rate: 2}, "want a name"},
		{"a}b", Config{Rate: 2}, "braces"},
	} {
		if _, err := New(rdb, "q", tc.name, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %+v): %v, want an error saying %q", tc.name, tc.cfg, err, tc.want)
		}
	}
	b, err := New(rdb, "q", "resend", Config{Rate: 2})
	if err != nil || b.Config().Burst != 1 || b.Config().String() != "2/s, burst 1" {
		t.Errorf("New with the defaults: %v %+v", err, b)
	}
}

// interval is the budget's wait between two tokens at rate requests a
// second: 1/rate, less the Headroom.
func interval(rate float64) time.Duration {
	return time.Duration(float64(time.Second) / (rate * (1 - Headroom)))
}

// Depart spaces the requests' departures at the rate, in every process:
// two requests that would leave together (the first slow from its token
// to the door, the second quick) leave an interval apart, and one after
// a quiet spell leaves at once.
func TestDepartSpacesRequestsAsTheirTokens(t *testing.T) {
	t.Parallel()
	s := setup(t)
	cfg := Config{Rate: 10}
	a, b := s.budget("resend", cfg), s.budget("resend", cfg)
	ctx := context.Background()
	start := time.Now()
	if err := a.Depart(ctx); err != nil {
		t.Fatal(err)
	}
	first := time.Since(start)
	if err := b.Depart(ctx); err != nil {
		t.Fatal(err)
	}
	second := time.Since(start)
	if first > 20*time.Millisecond || second < interval(10)-5*time.Millisecond || second > interval(10)+50*time.Millisecond {
		t.Errorf("departures after %s and %s, want the first at once and the second an interval (%s) later", first, second, interval(10))
	}
	time.Sleep(interval(10))
	start = time.Now()
	if err := a.Depart(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 20*time.Millisecond {
		t.Errorf("after a quiet interval a departure waited %s, want none", d)
	}

	// Departures do not spend the budget's tokens.
	if turn := take(t, a, 1); !turn.Go() {
		t.Errorf("a token after departures: %+v, want go", turn)
	}

	// Slow: at 0.5/s an interval is 2 s, past DepartWait: the second goes at once.
	slow := s.budget("slow", Config{Rate: 0.5})
	if err := slow.Depart(ctx); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := slow.Depart(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 20*time.Millisecond {
		t.Errorf("a departure at 0.5/s waited %s, want none: an interval is past DepartWait (%s)", d, DepartWait)
	}
}

// A budget without a rate (a relay whose limits no one configured)
// spaces nothing: every request goes at once, in every process. What
// the provider answers paces it all the same: its pause holds every
// process, and a rate it names paces them all at that rate.
func TestABudgetWithoutARateIsPacedByTheProvidersAnswers(t *testing.T) {
	t.Parallel()
	s := setup(t)
	a, b := s.budget("smtp", Config{}), s.budget("smtp", Config{})
	for i := range 20 {
		if turn := take(t, a, 1); !turn.Go() {
			t.Fatalf("request %d without a rate: %+v, want go", i, turn)
		}
	}
	if a.Rated() || a.Config().String() != "by its answers" {
		t.Errorf("without a rate: rated %v, %q", a.Rated(), a.Config())
	}
	if err := a.Depart(context.Background()); err != nil {
		t.Errorf("depart without a rate: %v", err)
	}
	observe(t, a, FromSMTP(450, "4.7.1", "Error: too much mail from 127.0.0.1"))
	if turn := take(t, b, 1); turn.By != ByPause || turn.Wait <= 0 || turn.Wait > DefaultPause {
		t.Fatalf("the other process after the relay's 450: %+v, want held by its pause", turn)
	}
	testenv.WaitFor(t, "the pause to end", 5*time.Second, func() bool { return take(t, b, 1).Go() })
	observe(t, b, Signal{Rate: 4, Reason: "said so"})
	if st := state(t, a); st.Rate != 4 || st.LearnedUntil.IsZero() {
		t.Errorf("after the provider named 4/s: %+v, want 4/s learned", st)
	}
	testenv.WaitFor(t, "a token", 5*time.Second, func() bool { return take(t, a, 1).Go() })
	if turn := take(t, a, 1); turn.Go() || turn.By != ByRate || turn.Wait > interval(4)+time.Millisecond {
		t.Errorf("at the rate it named: %+v, want the next token about %s away", turn, interval(4))
	}
	if !a.Rated() {
		t.Error("a budget the provider named a rate to is not rated")
	}
}
