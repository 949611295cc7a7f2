package pace_test

import (
	"context"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/pace"
)

// A worker takes the provider's token before it claims the delivery: a
// short wait is spent waiting and asking again, a longer one hands the
// task back to the queue for turn.Wait, holding nothing and spending no
// attempt. The provider's answer then corrects the budget for every
// worker.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	resend, err := pace.New(rdb, "sekali", "resend", pace.Config{Rate: 2})
	if err != nil {
		panic(err)
	}
	turn, err := resend.Take(ctx, pace.Urgent, 1)
	switch {
	case err != nil:
		// As when the lock cannot be taken: the task comes back later.
	case !turn.Go() && turn.Wait < 500*time.Millisecond:
		// Wait turn.Wait, and take again.
	case !turn.Go():
		// Hand the task back for turn.Wait (with some jitter), as a wait
		// the queue does not count as a failure.
	default:
		// Claim, render, send; the provider answers.
		var status int
		var header http.Header
		if s := pace.FromHTTP(status, header, time.Now()); !s.IsZero() {
			_ = resend.Observe(ctx, s) // log an error; the next answer says it again
		}
	}
}
