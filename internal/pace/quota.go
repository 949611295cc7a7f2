package pace

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// quotaSlices is how many slices a quota's window is counted in: a
// message counts from its send until its slice has left the window, so
// for between one window and one window and a slice (24 h and 15 min for
// a day's quota), never less. The count is never above the provider's
// and at most a slice late to free a message.
//
// A GCRA cannot hold a rolling quota: with a burst of the whole quota
// (what a flash sale needs) it refills the quota over the window while
// the provider still counts what was sent, so two sales within a day
// could send twice the quota. Nor is the quota the log of every send
// (SES allows millions a day): a hash of at most quotaSlices+1 counts.
const quotaSlices = 96

// quotaScript counts messages against a quota over a rolling window, on
// Redis' clock. KEYS[1] is the quota's hash: a field per slice (its
// number since the epoch), the messages sent in it. ARGV: the quota, a
// slice's length in milliseconds, how many slices make up the window, and
// the messages to count (0 only reads). It answers {1 if counted, the
// messages in the window (with these), the milliseconds until enough of
// the oldest slices leave the window for these to fit}. One key: a
// Redis Cluster runs it on the key's node.
var quotaScript = redis.NewScript(`
local quota, len, slices, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = math.floor(now / len)
local used, kept = 0, {}
local h = redis.call('HGETALL', KEYS[1])
for i = 1, #h, 2 do
  local slice, count = tonumber(h[i]), tonumber(h[i + 1])
  if slice < cur - slices then
    if n > 0 then redis.call('HDEL', KEYS[1], h[i]) end
  else
    used = used + count
    kept[#kept + 1] = {slice, count}
  end
end
if n == 0 then
  return {0, used, 0}
end
if used + n <= quota then
  redis.call('HINCRBY', KEYS[1], string.format('%d', cur), n)
  redis.call('PEXPIRE', KEYS[1], (slices + 2) * len)
  return {1, used + n, 0}
end
table.sort(kept, function(a, b) return a[1] < b[1] end)
local freed = 0
for _, sc in ipairs(kept) do
  freed = freed + sc[2]
  if used + n - freed <= quota then
    return {0, used, (sc[1] + slices + 1) * len - now}
  end
end
return {0, used, len}
`)

type quotaCount struct {
	taken bool
	used  int           // the messages the window holds
	wait  time.Duration // when not taken, until the window frees enough
}

// countQuota counts messages against the quota (0: only reads it).
func (b *Budget) countQuota(ctx context.Context, messages int) (quotaCount, error) {
	window := b.cfg.window().Milliseconds()
	slice := window / quotaSlices
	slices := (window + slice - 1) / slice
	v, err := quotaScript.Run(ctx, b.rdb, []string{b.quota}, b.cfg.Quota, slice, slices, messages).Int64Slice()
	if err == nil && len(v) != 3 {
		err = fmt.Errorf("the script answered %v", v)
	}
	if err != nil {
		return quotaCount{}, fmt.Errorf("pace %s: count the quota: %w", b.name, err)
	}
	return quotaCount{taken: v[0] == 1, used: int(v[1]), wait: time.Duration(v[2]) * time.Millisecond}, nil
}
