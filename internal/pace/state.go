package pace

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// State is a budget as every process sees it now, for metrics and the
// console.
type State struct {
	Name   string
	Config Config // Burst at least 1
	// Rate is the rate in force: Config.Rate, or a lower one the
	// provider said, until LearnedUntil.
	Rate         float64
	LearnedUntil time.Time // zero when the configured rate is in force
	// PausedUntil is when the pause in force ends, zero when there is
	// none; PauseReason is what the provider said ("http 429,
	// retry-after: 30").
	PausedUntil time.Time
	PauseReason string
	// QuotaUsed is the messages the quota's window holds, QuotaLeft
	// what it still takes (both 0 without a quota).
	QuotaUsed, QuotaLeft int
}

// State reads the budget (one round trip, two with a quota). Times are
// on this process's clock.
func (b *Budget) State(ctx context.Context) (State, error) {
	var pttl, lttl *redis.DurationCmd
	var reason, limit *redis.StringCmd
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		pttl, reason = p.PTTL(ctx, b.pause), p.Get(ctx, b.pause)
		lttl, limit = p.PTTL(ctx, b.limit), p.Get(ctx, b.limit)
		return nil
	})
	if err := cmdErr(pttl, reason, lttl, limit); err != nil {
		return State{}, fmt.Errorf("pace %s: read the state: %w", b.name, err)
	}
	now := time.Now()
	s := State{Name: b.name, Config: b.cfg, Rate: b.effective(limit)}
	if (b.cfg.Rate == 0 || s.Rate < b.cfg.Rate) && s.Rate > 0 && lttl.Val() > 0 {
		s.LearnedUntil = now.Add(lttl.Val())
	}
	if pttl.Val() > 0 {
		s.PausedUntil, s.PauseReason = now.Add(pttl.Val()), reason.Val()
	}
	if b.cfg.Quota > 0 {
		q, err := b.countQuota(ctx, 0)
		if err != nil {
			return State{}, err
		}
		s.QuotaUsed, s.QuotaLeft = q.used, max(b.cfg.Quota-q.used, 0)
	}
	return s, nil
}

// collectTimeout bounds a scrape's reads of Redis, for all budgets.
const collectTimeout = time.Second

// Collector exports the budgets' states as the sekali_provider_pace_*
// gauges, read from Redis at each scrape, so every worker exports the
// one budget every worker shares. The configured rate and quota are there
// from the start; a scrape while Redis does not answer leaves out what
// is read from it, rather than say something it does not know.
type Collector struct {
	budgets                                    []*Budget
	rate, effective, paused, quota, used, left *prometheus.Desc
}

// NewCollector collects budgets' states; register it with the worker's
// registry.
func NewCollector(budgets ...*Budget) *Collector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"provider"}, nil)
	}
	return &Collector{
		budgets:   budgets,
		rate:      desc("sekali_provider_pace_rate", "Requests per second a provider's budget is configured to, shared by every worker."),
		effective: desc("sekali_provider_pace_effective_rate", "Requests per second a provider's budget paces at now: the configured rate, or a lower one the provider announced (ratelimit-limit)."),
		paused:    desc("sekali_provider_pace_paused_seconds", "Seconds left of the pause a provider asked for (a 429's retry-after, ratelimit-remaining 0, an SMTP rate reply); 0 when not paused."),
		quota:     desc("sekali_provider_pace_quota", "Messages a provider takes per rolling quota window (SES's Max24HourSend), for budgets with a quota."),
		used:      desc("sekali_provider_pace_quota_used", "Messages sent through a provider within its quota's rolling window."),
		left:      desc("sekali_provider_pace_quota_remaining", "Messages a provider's quota still takes within its rolling window."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rate, c.effective, c.paused, c.quota, c.used, c.left} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, name string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
	}
	for _, b := range c.budgets {
		// A budget without a rate exports none (the rules that add the
		// providers' rates count it as they count no budget), until the
		// provider names one.
		if b.cfg.Rate > 0 {
			gauge(c.rate, b.cfg.Rate, b.name)
		}
		if b.cfg.Quota > 0 {
			gauge(c.quota, float64(b.cfg.Quota), b.name)
		}
		s, err := b.State(ctx)
		if err != nil {
			continue
		}
		if s.Rate > 0 {
			gauge(c.effective, s.Rate, b.name)
		}
		gauge(c.paused, max(time.Until(s.PausedUntil).Seconds(), 0), b.name)
		if b.cfg.Quota > 0 {
			gauge(c.used, float64(s.QuotaUsed), b.name)
			gauge(c.left, float64(s.QuotaLeft), b.name)
		}
	}
}
