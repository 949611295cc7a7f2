package order

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/redisconn"
)

// slowFirstEnqueue holds the first enqueue script the Redis client runs
// until ready says so (or ten seconds pass): a Redis slow for a moment,
// while other checkouts commit.
type slowFirstEnqueue struct {
	once  sync.Once
	ready func() bool
}

func (h *slowFirstEnqueue) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowFirstEnqueue) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.once.Do(func() {
				for deadline := time.Now().Add(10 * time.Second); !h.ready() && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
			})
		}
		return next(ctx, cmd)
	}
}

func (h *slowFirstEnqueue) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A lone checkout's confirmation goes at once in a task of its own, as
// it always did (TaskID, one delivery's payload). Checkouts that commit
// while an enqueue is in flight share tasks: fewer tasks than
// deliveries, each delivery in exactly one of them.
func TestConcurrentCheckoutsShareTasks(t *testing.T) {
	t.Parallel()
	e := setup(t)
	lone := e.place(t, basket(), keyed()).Notifications[0].ID
	info, err := e.inspector.GetTaskInfo(e.redis.Queue, queue.TaskID(lone))
	if err != nil {
		t.Fatalf("a lone checkout's confirmation has no task of its own: %v", err)
	}
	if task, err := queue.ParseTask(info.Payload); err != nil || len(task.Deliveries) != 1 || strings.Contains(string(info.Payload), "deliveries") {
		t.Errorf("a lone checkout's task: %s, want one delivery's payload", info.Payload)
	}
	if _, err := e.inspector.DeleteAllPendingTasks(e.redis.Queue); err != nil {
		t.Fatal(err)
	}

	// A service whose Redis is slow for its first enqueue, until every
	// checkout has committed.
	const n = 40
	rdb := redisconn.NewClient(e.redis.Opt)
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(&slowFirstEnqueue{ready: func() bool {
		var rows int
		err := e.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM notification_deliveries").Scan(&rows)
		return err == nil && rows == n+1
	}})
	reg := prometheus.NewRegistry()
	svc := NewService(e.db.Pool, queue.NewEnqueuer(rdb, e.redis.Queue, slog.New(slog.NewTextHandler(io.Discard, nil)), reg), e.templates, keyTTL, reg)
	ids := make([]uuid.UUID, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c := with(func(c *Checkout) { c.CustomerEmail = fmt.Sprintf("c%d@example.com", i) })
			p, err := svc.Place(context.Background(), c, keyed(), "")
			if err != nil {
				t.Errorf("checkout %d: %v", i, err)
				return
			}
			ids[i] = p.Notifications[0].ID
		})
	}
	wg.Wait()

	tasks, err := e.inspector.ListPendingTasks(e.redis.Queue, asynq.PageSize(1000))
	if err != nil {
		t.Fatal(err)
	}
	carriers := map[uuid.UUID]int{}
	sizes := make([]int, len(tasks))
	for i, info := range tasks {
		task, err := queue.ParseTask(info.Payload)
		ps := task.Deliveries
		if err != nil {
			t.Fatalf("task %s: %v", info.ID, err)
		}
		sizes[i] = len(ps)
		for _, p := range ps {
			carriers[p.DeliveryID]++
		}
	}
	t.Logf("%d checkouts at once: tasks of %v", n, sizes)
	if len(tasks) >= n/2 {
		t.Errorf("%d tasks for %d checkouts that committed while the first enqueue was in flight, want them to share", len(tasks), n)
	}
	for i, id := range ids {
		if carriers[id] != 1 {
			t.Errorf("checkout %d's confirmation is in %d tasks, want 1", i, carriers[id])
		}
	}
}
