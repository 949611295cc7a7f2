package notify

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// BenchmarkLockRoundTrip is the Redis work of one delivery through the
// worker's own lock code: a status-cache miss, taking the lock, and
// releasing it in the pipeline that also caches "sent".
func BenchmarkLockRoundTrip(b *testing.B) {
	rd := testenv.NewRedisServer(b) // its own: every iteration leaves a "sent" key behind
	rdb := redisconn.NewClient(rd.Opt)
	defer rdb.Close()
	l := redisLock{rdb: rdb, ttl: 30 * time.Second}
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		h := KeyHash("order-confirmation:" + strconv.Itoa(i) + ":bench@example.com")
		if l.cachedSent(ctx, h) {
			b.Fatal("unexpected cache hit")
		}
		token, ok, err := l.acquire(ctx, h)
		if err != nil || !ok {
			b.Fatal("acquire:", ok, err)
		}
		if released, err := l.release(ctx, h, token, true); err != nil || !released {
			b.Fatal("release:", released, err)
		}
	}
}
