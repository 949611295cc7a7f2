package worker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/metric"
)

// Metrics are the worker's Prometheus metrics; README.md lists them.
type Metrics struct {
	duplicates   *prometheus.CounterVec
	lockAcquired prometheus.Counter
	lockFailed   prometheus.Counter
	lockExpired  prometheus.Counter
	retries      *prometheus.CounterVec
	processing   prometheus.Histogram
	deliveries   *prometheus.CounterVec
	sendLatency  prometheus.Histogram
	blocked      prometheus.Counter
	handedBack   *prometheus.CounterVec
	providerUp   *prometheus.GaugeVec
	batchSize    *prometheus.HistogramVec
	// providerBatch: the messages of each request of many (send.go);
	// batchResent: such requests sent again, identical, after a lost
	// answer.
	providerBatch *prometheus.HistogramVec
	batchResent   *prometheus.CounterVec
	paceWait      *prometheus.HistogramVec
	departWait    *prometheus.HistogramVec
	throttled     *prometheus.CounterVec
	spilled       *prometheus.CounterVec
}

// NewMetrics creates the worker's metrics and registers them with reg.
// The series of known label values exist from the start, at zero, so
// that a rate() alert fires on the first event.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		duplicates: metric.CounterVec(reg, "sekali_duplicate_detected_total",
			"Duplicates caught before they caused a second e-mail, by the layer that caught them.",
			[]string{"layer"}, []string{"cache", "database", "lock", "fencing"}),
		lockAcquired: metric.Counter(reg, "sekali_lock_acquire_success_total", "Redis delivery locks acquired."),
		lockFailed:   metric.Counter(reg, "sekali_lock_acquire_failed_total", "Redis delivery locks found held by another worker."),
		lockExpired: metric.Counter(reg, "sekali_lock_expired_before_completion_total",
			"Attempts whose Redis lock expired before they finished: LOCK_TTL is too short for the provider's latency."),
		retries: metric.CounterVec(reg, "sekali_job_retry_total", "Task attempts that ended in a retry, by reason.", []string{"reason"},
			[]string{"smtp_4xx", "smtp_5xx", "http_4xx", "http_5xx", "deferred", "provider_unavailable", "throttled", "paced", "lock_busy", "lock_expired", "database", "redis"}),
		processing: metric.Histogram(reg, "sekali_job_processing_duration_seconds", "Time to handle one delivery task, whatever its outcome.", metric.Latency),
		// Its series, by template, are made known by New.
		deliveries: metric.CounterVec(reg, "sekali_deliveries_total",
			"Delivery attempts by template, outcome (sent, failed, retried, ambiguous, ...) and mode: live, or test (a test key's, which never reach a provider).", []string{"template", "outcome", "mode"}),
		batchSize: metric.HistogramVec(reg, "sekali_statement_batch_size",
			"Deliveries of a task served by one statement, by statement (claim, hand_over, complete): a task's, or one request's of many.",
			[]float64{1, 2, 4, 8, 16, 32, 64, 100}, []string{"statement"}),
		providerBatch: metric.HistogramVec(reg, "sekali_provider_batch_size",
			"Messages carried by each request of many to a provider that takes them (Resend, Postmark), by provider.",
			[]float64{1, 2, 5, 10, 20, 50, 100, 200, 500}, []string{"provider"}),
		batchResent: metric.CounterVec(reg, "sekali_provider_batch_resent_total",
			"Requests of many sent again, identical and under the same key, after their answer was lost, by provider.",
			[]string{"provider"}, nil),
		sendLatency: metric.Histogram(reg, "sekali_provider_send_duration_seconds",
			"Time the mail provider took to take (or refuse) one message.", metric.Latency),
		blocked: metric.Counter(reg, "sekali_deliveries_blocked_total",
			"Tasks not sent because an operator's block on the key or recipient applied."),
		handedBack: metric.CounterVec(reg, "sekali_tasks_handed_back_total",
			"Tasks this worker gave back to the queue without an attempt: provider_unavailable (the provider refuses us, or the one a delivery is pinned to does), unknown_template (an older worker during a rolling deploy), pinned_to_missing_provider (a delivery pinned to a provider not in PROVIDERS: an operator must decide), shutdown, paced (the provider's budget had no request to spare: back for its turn), yielded (mail that may wait, held back while confirmations wait for the provider's budget).",
			[]string{"reason"}, []string{"provider_unavailable", "unknown_template", string(resultPinnedMissing), "shutdown", "paced", "yielded"}),
		providerUp: metric.GaugeVec(reg, "sekali_provider_up",
			"1 while this provider takes mail from this worker, 0 while it refuses our session (connect, TLS, AUTH, sender, throttling) and the worker only probes it; with PROVIDERS, the next provider that is up takes the mail meanwhile.",
			[]string{"provider"}),
		paceWait: metric.HistogramVec(reg, "sekali_pace_wait_seconds",
			"Time a task waited in its goroutine for its provider's token (at most PACE_WAIT), by provider.", metric.Latency, []string{"provider"}),
		departWait: metric.HistogramVec(reg, "sekali_pace_depart_wait_seconds",
			"Time a request waited after its hand-over for its provider's departures to space it (at most a second), by provider.", metric.Latency, []string{"provider"}),
		throttled: metric.CounterVec(reg, "sekali_provider_throttled_total",
			"Requests the provider refused for pace (a 429, SES's throttling, an SMTP rate reply), by provider: nothing was taken; its budget was paused for every worker.",
			[]string{"provider"}),
		spilled: metric.CounterVec(reg, "sekali_pace_spilled_total",
			"Deliveries sent through a later provider of PROVIDERS because the first's pace would have kept them waiting past PACE_SPILL_AFTER, by provider from and to.",
			[]string{"from", "to"}),
	}
}

// deliveryOutcomes are the outcome label values of sekali_deliveries_total.
var deliveryOutcomes = []string{"sent", "failed", "retried", "held", "ambiguous", "suppressed"}

// knowTemplates creates the series of every template and outcome, at zero.
func (m *Metrics) knowTemplates(names []string) {
	metric.Known(m.deliveries, names, deliveryOutcomes, []string{"live", "test"})
}

// knowProviders creates the series of every provider, at zero.
func (m *Metrics) knowProviders(ps []NamedProvider) {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	metric.Known(m.throttled, names)
}
