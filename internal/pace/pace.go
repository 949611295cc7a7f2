// Package pace keeps one budget of requests per mail provider (and
// account) in Redis, shared by every worker process and replica, so that
// together they send at the provider's pace instead of each learning its
// limit alone. A provider's refusal for rate (an HTTP 429, an SMTP rate
// reply) is a pace, not a failure: it pauses the budget for everyone, and
// a lower limit the provider announces lowers everyone's rate.
//
// A budget is a GCRA (generic cell rate algorithm: a token bucket kept as
// one timestamp) run by github.com/go-redis/redis_rate in one Lua script
// on Redis' own clock, so that the workers' clocks never matter. One
// token is one request to the provider, whatever it carries; an optional
// quota counts the messages of a rolling window (SES's Max24HourSend).
//
// Take answers at once, go or wait: it never blocks, so that a caller
// who would wait long hands its task back to the queue (asynq's
// ProcessIn) and holds nothing meanwhile, and one that waits a short
// while asks again when its token is due.
//
// Requests travel in two lanes (Lane): while an urgent request waits
// for the budget, in any process, the later lane's requests are given
// no token, so that when the budget is scarce a flash sale's
// confirmations never share it with a newsletter's backlog.
//
// Keys, for a budget named name of the deployment whose queue is queue;
// the hash tag {queue:name} keeps them in one slot of a Redis Cluster, so
// that one round trip's commands reach one node:
//
//	rate:sekali:pace:{queue:name}   the GCRA's timestamp (redis_rate adds "rate:")
//	sekali:pace:{queue:name}:pause  a pause every worker honours; its value says why, its TTL until when
//	sekali:pace:{queue:name}:limit  a rate the provider said, lower than the configuration; expires after LearnFor
//	sekali:pace:{queue:name}:quota  the quota's counts, one hash field per slice of its window
//	rate:sekali:pace:{queue:name}:depart  Depart's GCRA: when the requests leave
//	sekali:pace:{queue:name}:urgent  urgent requests wait for the budget; the later lane yields until its TTL
package pace

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// LearnFor is how long a lower rate the provider said holds when the
// provider says nothing more: then the configured rate comes back and is
// checked against the provider's next answer. A provider that keeps
// announcing its limit (Resend, on every answer) keeps it in force.
const LearnFor = time.Hour

// Config is a budget's pace.
type Config struct {
	// Rate is the requests per second the provider allows this account,
	// fractional allowed (Resend's default is 2; SES's maximum send rate
	// is the account's). At least 0.001, or 0: no rate of its own, paced
	// only by what the provider's answers say (its pauses, a rate it
	// names), as a relay whose limits no one configured.
	Rate float64
	// Burst is how many requests may go at once after a quiet spell; 0
	// means 1. One is the safe choice: a provider that counts requests
	// per window (Resend: per second) refuses whatever goes above Rate in
	// a window, and a burst of b lets b-1 more than Rate into one; more
	// is right only for a provider that documents a burst of its own.
	Burst int
	// Quota is how many messages the provider takes per QuotaWindow, 0
	// for none (SES: Max24HourSend; a plan's daily cap). A request
	// carrying several messages spends one token of Rate and its messages
	// of Quota.
	Quota int
	// QuotaWindow is the quota's window, rolling; 0 means 24 h. A
	// rolling window, not a calendar day: SES counts "the last 24 hours",
	// and a calendar day's count would let a whole quota go just before
	// midnight and another just after, which a rolling provider refuses.
	// For a plan whose cap restarts at midnight a rolling window is only
	// more cautious: it never sends what the plan refuses.
	QuotaWindow time.Duration
}

// String describes the pace for a start-up line: "2/s, burst 1",
// "14/s, burst 1, 50000 per 24h0m0s", or "by its answers" without a rate.
func (c Config) String() string {
	s := strconv.FormatFloat(c.Rate, 'f', -1, 64) + "/s, burst " + strconv.Itoa(max(c.Burst, 1))
	if c.Rate == 0 {
		s = "by its answers"
	}
	if c.Quota > 0 {
		s += ", " + strconv.Itoa(c.Quota) + " per " + c.window().String()
	}
	return s
}

func (c Config) window() time.Duration {
	if c.QuotaWindow == 0 {
		return 24 * time.Hour
	}
	return c.QuotaWindow
}

// Budget is one provider's (and account's) budget. Every Budget made with
// the same queue and name over the same Redis, in any process, is the
// same budget. It is safe for concurrent use.
type Budget struct {
	rdb     redis.UniversalClient
	limiter *redis_rate.Limiter
	name    string
	cfg     Config
	key     string // the GCRA's, without redis_rate's "rate:"
	pause   string
	limit   string
	quota   string
	depart  string // Depart's GCRA, without redis_rate's "rate:"
	urgent  string
	// rate is the rate in force when Take last read it (math.Float64bits),
	// for Depart and the urgent hold; 0 before the first Take.
	rate atomic.Uint64
	// learned is whether the last read of the limit key found one: when
	// not, a provider announcing the configured rate or more changes
	// nothing and Observe skips the write (Resend announces it on every
	// answer).
	learned atomic.Bool
}

// New returns the budget name (the provider, with its account when a
// deployment sends through several of one provider's: "resend",
// "ses:eu-west-1") of the deployment whose queue is queue, kept in rdb.
func New(rdb redis.UniversalClient, queue, name string, cfg Config) (*Budget, error) {
	var problems []error
	if name == "" || strings.ContainsAny(name+queue, "{}") {
		problems = append(problems, fmt.Errorf("budget name %q of queue %q: want a name, and no braces in either (they are the keys' hash tag)", name, queue))
	}
	if !(cfg.Rate >= 0.001 || cfg.Rate == 0) || math.IsInf(cfg.Rate, 0) {
		problems = append(problems, fmt.Errorf("rate %v: want at least 0.001 requests per second, or 0 (by the provider's answers)", cfg.Rate))
	}
	if cfg.Burst < 0 {
		problems = append(problems, fmt.Errorf("burst %d: want 0 (1) or more", cfg.Burst))
	}
	if cfg.Quota < 0 || cfg.QuotaWindow < 0 || (cfg.Quota > 0 && cfg.window() < quotaSlices*time.Millisecond) {
		problems = append(problems, fmt.Errorf("quota %d per %s: want 0 (none) or more per a window of %s or more", cfg.Quota, cfg.QuotaWindow, quotaSlices*time.Millisecond))
	}
	if err := errors.Join(problems...); err != nil {
		return nil, fmt.Errorf("pace %s: %w", name, err)
	}
	cfg.Burst = max(cfg.Burst, 1)
	base := "sekali:pace:{" + queue + ":" + name + "}"
	return &Budget{
		rdb: rdb, limiter: redis_rate.NewLimiter(rdb), name: name, cfg: cfg,
		key: base, pause: base + ":pause", limit: base + ":limit", quota: base + ":quota", depart: base + ":depart",
		urgent: base + ":urgent",
	}, nil
}

// Name is the budget's name, as given to New.
func (b *Budget) Name() string { return b.name }

// Config is the budget's configuration, its Burst at least 1.
func (b *Budget) Config() Config { return b.cfg }

// Hold is what keeps a request from going now.
type Hold string

const (
	ByPause  Hold = "pause"  // the provider asked every sender to wait (a 429, ratelimit-remaining 0, an SMTP rate reply)
	ByRate   Hold = "rate"   // the budget's rate: the next token is not due yet
	ByQuota  Hold = "quota"  // the quota of the window is spent
	ByUrgent Hold = "urgent" // a request of the later lane: urgent ones wait for the budget
)

// Lane is which requests a scarce budget serves first.
type Lane int

const (
	// Urgent is transactional mail: an order's confirmation, a password
	// reset. An urgent request that has to wait for its token keeps the
	// later lane from the budget, in every process, until it has had it.
	Urgent Lane = iota
	// Later is subscription mail and scheduled reminders: given a token
	// only while no urgent request waits for one.
	Later
)

// A Turn is Take's answer: go (Wait is zero, and the token is taken), or
// wait: no token was taken, one is expected after Wait, and By says what
// holds the request back.
type Turn struct {
	Wait time.Duration
	By   Hold
}

// Go reports whether the request may go: a token was taken.
func (t Turn) Go() bool { return t.Wait == 0 }

// Take asks for one request's token, for a request carrying messages
// messages (1 for a single send; what the quota counts). It answers at
// once: go, or the time until a token is expected. In one round trip it
// reads the pause and the rate the provider said (and, for the later
// lane, whether urgent requests wait), then takes the rate's token (a
// second), then the quota's (a third, with a quota). An urgent request
// told to wait says so for the later lane, for its wait and one
// interval more (a fourth; only when it waits). When the
// quota refuses, the rate's token is spent all the same: a token too few
// costs a moment's pace, a message of the quota too few could cost a day.
//
// When Redis does not answer (within ctx and the client's timeouts)
// Take returns the error and no token. Saying go instead would buy
// nothing where Redis is down altogether, for a worker cannot claim
// without its lock, which is in Redis too; and where only the budget's
// node is (a Redis Cluster with the lock's slot on another), it would
// let every worker send unpaced: the burst of refusals this package is
// there to prevent. The caller treats the error as it treats its lock
// failing: the task comes back later. A Redis that loses its data (a
// restart without persistence) forgets the pauses, the learned rates and
// the quota's counts: the provider's next answers teach the first two
// again, the quota starts afresh.
func (b *Budget) Take(ctx context.Context, lane Lane, messages int) (Turn, error) {
	if messages < 1 || (b.cfg.Quota > 0 && messages > b.cfg.Quota) {
		return Turn{}, fmt.Errorf("pace %s: a request of %d messages, want 1 to the quota (%d)", b.name, messages, b.cfg.Quota)
	}
	var pttl, uttl *redis.DurationCmd
	var limit *redis.StringCmd
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		pttl = p.PTTL(ctx, b.pause)
		limit = p.Get(ctx, b.limit)
		if lane == Later {
			uttl = p.PTTL(ctx, b.urgent)
		}
		return nil
	})
	if err := cmdErr(pttl, limit); err != nil {
		return Turn{}, fmt.Errorf("pace %s: read the pause: %w", b.name, err)
	}
	var held time.Duration
	if uttl != nil {
		if err := cmdErr(uttl); err != nil {
			return Turn{}, fmt.Errorf("pace %s: read the urgent hold: %w", b.name, err)
		}
		held = uttl.Val()
	}
	turn, err := b.take(ctx, pttl.Val(), held, b.effective(limit), messages)
	if err != nil || turn.Go() || lane != Urgent {
		return turn, err
	}
	// An urgent request waits: the later lane yields until it has had its
	// token, and an interval more for the next urgent one to ask.
	hold := turn.Wait + min(b.interval(), DepartWait)
	if err := holdScript.Run(ctx, b.rdb, []string{b.urgent}, max(hold.Milliseconds(), 1), string(turn.By)).Err(); err != nil {
		return Turn{}, fmt.Errorf("pace %s: hold the later lane: %w", b.name, err)
	}
	return turn, nil
}

// Wait takes one request's token as Take does, waiting for it as long
// as it is due within `within` of now: go, or the Turn to come back
// with — one past within, or one of the later lane held back for urgent
// requests (ByUrgent), which waits for nothing in the caller. Waiting
// holds nothing: no claim, no lease, no lock.
func (b *Budget) Wait(ctx context.Context, lane Lane, messages int, within time.Duration) (Turn, error) {
	deadline := time.Now().Add(within)
	for {
		turn, err := b.Take(ctx, lane, messages)
		if err != nil || turn.Go() || turn.By == ByUrgent || time.Until(deadline) < turn.Wait {
			return turn, err
		}
		timer := time.NewTimer(turn.Wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return turn, ctx.Err()
		case <-timer.C:
		}
	}
}

// take is Take's verdict once the pause and, for the later lane, the
// urgent requests' hold are read (how long each still lasts; 0 for
// none): the pause's, the hold's, or the tokens' at rate.
func (b *Budget) take(ctx context.Context, pause, held time.Duration, rate float64, messages int) (Turn, error) {
	if pause > 0 {
		return Turn{Wait: pause, By: ByPause}, nil
	}
	if held > 0 {
		return Turn{Wait: held, By: ByUrgent}, nil
	}
	if rate > 0 {
		res, err := b.limiter.Allow(ctx, b.key, b.gcra(rate))
		if err != nil {
			return Turn{}, fmt.Errorf("pace %s: take a token: %w", b.name, err)
		}
		if res.Allowed == 0 {
			return Turn{Wait: max(res.RetryAfter, time.Millisecond), By: ByRate}, nil
		}
	}
	if b.cfg.Quota == 0 {
		return Turn{}, nil
	}
	q, err := b.countQuota(ctx, messages)
	if err != nil {
		return Turn{}, err
	}
	if !q.taken {
		return Turn{Wait: max(q.wait, time.Millisecond), By: ByQuota}, nil
	}
	return Turn{}, nil
}

// effective is the rate in force: the configured one, or a lower one the
// provider said (the limit key's value, read by Take or State); 0 for
// none, without a configured rate.
func (b *Budget) effective(limit *redis.StringCmd) float64 {
	rate, err := strconv.ParseFloat(limit.Val(), 64)
	b.learned.Store(err == nil)
	if err != nil || !(rate > 0) || (b.cfg.Rate > 0 && rate >= b.cfg.Rate) {
		rate = b.cfg.Rate
	}
	if rate > 0 {
		rate = max(rate, 0.001)
	}
	b.rate.Store(math.Float64bits(rate))
	return rate
}

// DepartWait is the longest wait Depart accepts from the departures'
// GCRA: past it (a rate under one a second) a request goes at once.
const DepartWait = time.Second

// Depart spaces the departures of requests whose tokens Take gave, at the
// rate in force, in every process: it returns when the request may
// leave. A token is taken before the claim, so that a delivery waiting
// for its turn holds nothing, but then come the claim, the render and
// the hand-over, which take a few milliseconds or, while checkouts load
// the database, a hundred; and a process the machine did not run for a
// moment sends what it held all at once. Requests whose tokens were
// evenly spaced leave unevenly, and a provider that counts arrivals in a
// sliding window (N a second: any N+1 within a second refused) refuses
// whichever caught up with the one N before it, each 429 pausing every
// sender for its retry-after. Depart is a second GCRA at the same rate
// and burst, taken right before the request leaves: a request that would
// leave sooner than one interval after the last waits the difference,
// so that the provider sees them spaced as their tokens were. Waiters
// are not given up on by the clock (those of a process that stalled
// would then all go at once) but take their turns; a wait longer than
// DepartWait goes at once. It spends nothing of the budget, and at the
// same rate as the tokens it only absorbs their unevenness. When Redis
// does not answer, the request goes: its token was taken, and Depart
// only smooths.
func (b *Budget) Depart(ctx context.Context) error {
	if !b.Rated() {
		return nil
	}
	limit := b.gcra(b.rateNow())
	for {
		res, err := b.limiter.Allow(ctx, b.depart, limit)
		if err != nil {
			return fmt.Errorf("pace %s: depart: %w", b.name, err)
		}
		wait := res.RetryAfter
		if res.Allowed > 0 || wait > DepartWait {
			return nil
		}
		timer := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// Headroom is the share of a provider's rate a budget leaves unspent.
// The provider counts requests as they arrive, the budget as their
// tokens are taken, and between the two lie the lock, the claim and the
// render, which take a few milliseconds or, on a busy machine, a few
// tens: at exactly the provider's rate a request that was quicker on its
// way than the one N before it finds the provider's window full (N per
// second: any N+1 arriving within a second), and each such 429 pauses
// every sender for its retry-after, a whole second. 5% gives a window of
// N requests a second some 50 ms of slack. Measured in the flash sale
// scenario (internal/chaos: Resend's stand-in at 5 a second, a sliding
// window, two workers, 60 checkouts at once behind 30 newsletters), at
// the rate itself 11 of 102 requests were refused and the pace was 61%
// of the limit; with the headroom one or two of 92, and 84–90%. Depart
// takes away most of that unevenness (the time from the token to the
// door); the headroom stays for what is left after it, the stalls
// between the door and the write and the network's own jitter (with
// both: none refused, 93–95%).
const Headroom = 0.05

// gcra is redis_rate's limit for rate requests per second, less the
// Headroom: its Rate and Period count only as their ratio, the emission
// interval, so a fractional rate is one request per 1/rate seconds.
func (b *Budget) gcra(rate float64) redis_rate.Limit {
	return redis_rate.Limit{Rate: 1, Burst: b.cfg.Burst, Period: emission(rate)}
}

// emission is the interval between tokens at rate, less the Headroom.
func emission(rate float64) time.Duration {
	return time.Duration(float64(time.Second) / (rate * (1 - Headroom)))
}

// rateNow is the rate in force when Take last read it, the configured
// one before the first Take.
func (b *Budget) rateNow() float64 {
	if bits := b.rate.Load(); bits != 0 {
		return math.Float64frombits(bits)
	}
	return b.cfg.Rate
}

// interval is the interval between tokens at the rate in force, 0
// without one.
func (b *Budget) interval() time.Duration {
	if !b.Rated() {
		return 0
	}
	return emission(b.rateNow())
}

// Rated reports whether a rate is in force, configured or said by the
// provider, as Take last read it: without one the budget spaces no
// requests, and holds them only while the provider asked for a pause.
func (b *Budget) Rated() bool { return b.rateNow() > 0 }

// cmdErr is the first error of cmds, a missing key (redis.Nil) being none.
func cmdErr(cmds ...redis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}
