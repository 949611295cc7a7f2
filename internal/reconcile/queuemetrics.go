package reconcile

import (
	"context"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/notify"
)

// QueueCollector exposes asynq's view of the delivery queue, read through
// the inspector at scrape time: task counts by state, the age of the
// oldest pending task, and whether the queue is paused.
type QueueCollector struct {
	inspector *asynq.Inspector
	rdb       redis.UniversalClient
	queue     string
	size      *prometheus.Desc
	latency   *prometheus.Desc
	paused    *prometheus.Desc
	up        *prometheus.Desc
}

// NewQueueCollector returns a collector for queue.
func NewQueueCollector(ins *asynq.Inspector, rdb redis.UniversalClient, queue string) *QueueCollector {
	labels := prometheus.Labels{"queue": queue}
	return &QueueCollector{
		inspector: ins,
		rdb:       rdb,
		queue:     queue,
		size:      prometheus.NewDesc("sekali_queue_tasks", "Tasks in the asynq delivery queue by state.", []string{"state"}, labels),
		latency:   prometheus.NewDesc("sekali_queue_latency_seconds", "Age of the oldest pending task in the delivery queue.", nil, labels),
		paused:    prometheus.NewDesc("sekali_queue_paused", "1 while the delivery queue is paused.", nil, labels),
		up:        prometheus.NewDesc("sekali_queue_inspect_up", "1 when the queue could be inspected at this scrape.", nil, labels),
	}
}

// Describe implements prometheus.Collector.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.size
	ch <- c.latency
	ch <- c.paused
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := notify.QueueInfo(ctx, c.inspector, c.rdb, c.queue)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for state, n := range map[string]int{
		"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled,
		"retry": info.Retry, "archived": info.Archived, "completed": info.Completed,
	} {
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(c.latency, prometheus.GaugeValue, info.Latency.Seconds())
	paused := 0.0
	if info.Paused {
		paused = 1
	}
	ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, paused)
}
