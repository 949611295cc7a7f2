package pace

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/mail"
)

// MaxPause is the longest pause a provider's answer sets. A longer one
// (a retry-after a day ahead, garbage that parses as a century) is cut
// to it, and the Signal says so: after an hour one request asks again,
// and a provider that still refuses pauses the budget again. Mail held
// for a day by a provider's slip costs more than one refused request an
// hour.
const MaxPause = time.Hour

// DefaultPause is the pause of a refusal for rate that does not say for
// how long: a 429 without retry-after or ratelimit-reset (and the least
// a 429 pauses), an SMTP rate reply.
const DefaultPause = time.Second

// A Signal is what a provider's answer says about its pace, for Observe:
// how long every sender must wait, and the rate it allows. The zero
// Signal says nothing.
type Signal struct {
	// Pause: every sender waits this long before the next request; 0
	// for no pause.
	Pause time.Duration
	// Rate: the requests per second the provider says it allows this
	// account; 0 when it did not say.
	Rate float64
	// Capped: the answer asked for a pause longer than MaxPause, and
	// Pause is cut to it.
	Capped bool
	// Reason is what said so, for the log and the console:
	// "http 429, retry-after: 30".
	Reason string
}

// IsZero reports whether s says nothing: Observe would change nothing.
func (s Signal) IsZero() bool { return s.Pause == 0 && s.Rate == 0 }

// FromHTTP reads the signal in an HTTP provider's answer, of status
// status and header fields h, at now (for a retry-after that is a date).
// The fields are those of the IETF RateLimit header fields draft, which
// Resend sends (ratelimit-limit, ratelimit-remaining, ratelimit-reset,
// and retry-after on a 429):
//
//   - a 429 pauses for the longest of its retry-after (seconds or an HTTP
//     date), its ratelimit-reset, and DefaultPause;
//   - ratelimit-remaining: 0 with a ratelimit-reset pauses until the
//     reset, on any answer: the next request would be refused;
//   - ratelimit-limit is the rate, over the window that a ratelimit-limit
//     item or a ratelimit-policy item of that quota gives (w=), else one
//     second (Resend's, which sends no policy); a window over a minute is
//     a quota, not a rate, and is not read.
//
// What is missing or garbled changes nothing; a pause beyond MaxPause is
// capped, and says so.
func FromHTTP(status int, h http.Header, now time.Time) Signal {
	var s Signal
	var why []string
	reset, resetOK := seconds(h.Get("Ratelimit-Reset"))
	switch remaining := strings.TrimSpace(h.Get("Ratelimit-Remaining")); {
	case status == http.StatusTooManyRequests:
		pause := DefaultPause.Seconds()
		why = append(why, "http 429")
		if v := h.Get("Retry-After"); v != "" {
			if after, ok := retryAfter(v, now); ok {
				pause = math.Max(pause, after)
				why = append(why, "retry-after: "+clip(v))
			} else {
				why = append(why, "retry-after unreadable: "+clip(v))
			}
		}
		if resetOK {
			pause = math.Max(pause, reset)
			why = append(why, "ratelimit-reset: "+clip(h.Get("Ratelimit-Reset")))
		}
		s.Pause, s.Capped = capPause(pause)
	case remaining == "0" && resetOK && reset > 0:
		s.Pause, s.Capped = capPause(reset)
		why = append(why, "ratelimit-remaining: 0, ratelimit-reset: "+clip(h.Get("Ratelimit-Reset")))
	}
	if rate, ok := limitRate(h.Get("Ratelimit-Limit"), h.Get("Ratelimit-Policy")); ok {
		s.Rate = rate
		why = append(why, "ratelimit-limit: "+clip(h.Get("Ratelimit-Limit")))
	}
	if s.Capped {
		why = append(why, "pause capped at "+MaxPause.String())
	}
	s.Reason = strings.Join(why, ", ")
	return s
}

// FromSMTP reads the signal in an SMTP reply that the SMTP provider
// classified a refusal for pace (mail.OutcomeThrottled, by its table of
// relays' replies, internal/smtp's paceReplies): it does not judge the
// reply again. SMTP has no field for how long: the pause is
// DefaultPause, and a relay that still refuses pauses the budget again;
// a time the reply's text names (a date, a daily quota's hour) is the
// provider's SendError.Pause, which the caller takes when longer.
func FromSMTP(code int, enhanced, text string) Signal {
	return Signal{Pause: DefaultPause, Reason: strings.TrimSpace(fmt.Sprintf("smtp %d %s %s", code, enhanced, clip(text)))}
}

// holdScript holds a budget (pauses it, or holds its later lane) for
// ARGV[1] milliseconds, saying why (ARGV[2]), unless it is already held
// for longer: the longest hold wins, a shorter one never shortens it.
// One key.
var holdScript = redis.NewScript(`
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
  return 1
end
return 0
`)

// Observe applies a provider's signal to the budget, for every process
// at once: a pause (at most MaxPause) that every Take honours until it
// ends, unless one that ends later is in force; a rate lower than the
// configured one, in force for LearnFor after the provider last said it;
// a rate at or above the configured one ends a lower one said before (the
// provider says it allows more now), but never raises the rate above the
// configuration. A zero Signal changes nothing and costs no round trip.
func (b *Budget) Observe(ctx context.Context, s Signal) error {
	if s.Pause > 0 {
		ms := max(min(s.Pause, MaxPause).Milliseconds(), 1)
		reason := s.Reason
		if reason == "" {
			reason = "paused"
		}
		if err := holdScript.Run(ctx, b.rdb, []string{b.pause}, ms, reason).Err(); err != nil {
			return fmt.Errorf("pace %s: pause: %w", b.name, err)
		}
	}
	switch {
	case s.Rate > 0 && (b.cfg.Rate == 0 || s.Rate < b.cfg.Rate):
		if err := b.rdb.Set(ctx, b.limit, strconv.FormatFloat(s.Rate, 'g', -1, 64), LearnFor).Err(); err != nil {
			return fmt.Errorf("pace %s: lower the rate: %w", b.name, err)
		}
		b.learned.Store(true)
	case s.Rate > 0 && b.learned.Load():
		if err := b.rdb.Del(ctx, b.limit).Err(); err != nil {
			return fmt.Errorf("pace %s: restore the rate: %w", b.name, err)
		}
		b.learned.Store(false)
	}
	return nil
}

// seconds reads a number of seconds that is not negative (delta-seconds,
// or a decimal for the tolerant).
func seconds(v string) (float64, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(f >= 0) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// retryAfter reads a retry-after (RFC 9110: delta-seconds or an HTTP
// date) as seconds from now; a date past is 0.
func retryAfter(v string, now time.Time) (float64, bool) {
	if f, ok := seconds(v); ok {
		return f, true
	}
	t, err := http.ParseTime(strings.TrimSpace(v))
	if err != nil {
		return 0, false
	}
	return math.Max(t.Sub(now).Seconds(), 0), true
}

// capPause makes a pause of f seconds, at most MaxPause.
func capPause(f float64) (time.Duration, bool) {
	if f > MaxPause.Seconds() {
		return MaxPause, true
	}
	return time.Duration(f * float64(time.Second)), false
}

// limitRate reads ratelimit-limit as requests per second. The drafts
// spell it "10" or (draft 02) "10, 10;w=1, 1000;w=3600": the first
// number is the limit, and a w= with it, or with a ratelimit-policy item
// of that quota (`10;w=1`, or the later `"default";q=10;w=1`), its window
// in seconds.
func limitRate(limit, policy string) (float64, bool) {
	first, _, _ := strings.Cut(limit, ",")
	quota, window, ok := policyItem(first)
	if !ok || !(quota >= 1) {
		return 0, false
	}
	if window == 0 {
		for item := range strings.SplitSeq(policy, ",") {
			if q, w, ok := policyItem(item); ok && q == quota && w > 0 {
				window = w
				break
			}
		}
	}
	if window == 0 {
		window = 1
	}
	if window > 60 {
		return 0, false
	}
	return quota / window, true
}

// policyItem reads "10;w=1" or `"name";q=10;w=1`: the quota, and the
// window (0 when not given).
func policyItem(item string) (quota, window float64, ok bool) {
	for i, p := range strings.Split(item, ";") {
		p = strings.TrimSpace(p)
		switch {
		case i == 0:
			quota, ok = seconds(p)
		case strings.HasPrefix(p, "q="):
			quota, ok = seconds(p[2:])
		case strings.HasPrefix(p, "w="):
			if w, wok := seconds(p[2:]); wok {
				window = w
			}
		}
	}
	return quota, window, ok && !math.IsInf(quota, 0)
}

// clip keeps what a provider said short enough for a log line and a
// key's value, and without the addresses a reply may quote (no address
// reaches a log line or Redis).
func clip(s string) string {
	s = mail.RedactAddresses(strings.TrimSpace(s))
	if len(s) <= 120 {
		return s
	}
	i := 120
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
