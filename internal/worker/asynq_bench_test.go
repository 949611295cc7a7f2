package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// BenchmarkAsynqTask is what the queue itself costs per delivery, the
// part of sekali's cost per order that is asynq's: a task enqueued as the
// API does (Enqueuer), then dequeued and completed by an asynq server
// with Worker.Run's polling, sixteen at a time, and a handler that does
// nothing (no worker: the queue alone is measured). On a redis-server of
// its own, so that its CPU is the queue's alone: redis-µs/op is Redis's
// CPU (INFO cpu), go-µs/op this process's (the enqueue, the dequeue and
// completion, asynq's heartbeat and polling), redis-cmds/op the commands
// Redis ran per task (logged by name). BenchmarkLockRoundTrip's
// redis-µs/op is the rest of a delivery's Redis work, the worker's lock
// and cache.
func BenchmarkAsynqTask(b *testing.B) {
	srv := testenv.NewRedisServer(b)
	rdb := redisconn.NewClient(srv.Opt)
	defer rdb.Close()
	enq := queue.NewEnqueuer(rdb, srv.Queue, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	var done atomic.Int64
	server := asynq.NewServer(srv.Opt, asynq.Config{
		Concurrency: 16, Queues: map[string]int{srv.Queue: 1}, TaskCheckInterval: DefaultTaskCheckInterval,
		IsFailure: IsFailure, LogLevel: asynq.FatalLevel,
	})
	if err := server.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { done.Add(1); return nil })); err != nil {
		b.Fatal(err)
	}
	defer server.Shutdown()
	ctx := context.Background()
	enqueue := func(n int) {
		for i := range n {
			if err := enq.Enqueue(ctx, notify.Delivery{ID: uuid.New(), IdempotencyKey: "order-confirmation:" + strconv.Itoa(i) + ":bench@example.com"}); err != nil {
				b.Fatal(err)
			}
		}
	}
	wait := func(n int64) {
		for done.Load() < n {
			time.Sleep(time.Millisecond)
		}
	}
	enqueue(200) // warm up: connections, scripts loaded
	wait(200)

	redisBefore, goBefore, doneBefore, cmdsBefore := redisCPU(b, rdb), processCPU(b), done.Load(), redisCommands(b, rdb)
	b.ResetTimer()
	enqueue(b.N)
	wait(doneBefore + int64(b.N))
	b.StopTimer()
	b.ReportMetric(float64((redisCPU(b, rdb)-redisBefore).Microseconds())/float64(b.N), "redis-µs/op")
	b.ReportMetric(float64((processCPU(b)-goBefore).Microseconds())/float64(b.N), "go-µs/op")
	var total int64
	var each []string
	for name, n := range redisCommands(b, rdb) {
		if d := n - cmdsBefore[name]; d > 0 {
			total += d
			each = append(each, fmt.Sprintf("%s %.2f", name, float64(d)/float64(b.N)))
		}
	}
	slices.Sort(each)
	b.ReportMetric(float64(total)/float64(b.N), "redis-cmds/op")
	b.Logf("Redis commands per task: %s", strings.Join(each, ", "))
}

// redisCommands is the calls of each command Redis has run (INFO
// commandstats).
func redisCommands(b *testing.B, rdb redis.UniversalClient) map[string]int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, v, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(v, ",")
		if calls[name], err = strconv.ParseInt(n, 10, 64); err != nil {
			b.Fatalf("commandstats %q: %v", line, err)
		}
	}
	return calls
}

// redisCPU is the CPU time the Redis server behind rdb has used.
func redisCPU(b *testing.B, rdb redis.UniversalClient) time.Duration {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	var total float64
	for _, k := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := strconv.ParseFloat(fields[k], 64)
		if err != nil {
			b.Fatalf("redis INFO cpu %s: %v", k, err)
		}
		total += v
	}
	return time.Duration(total * float64(time.Second))
}

// processCPU is the CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
