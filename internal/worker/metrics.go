package worker

import "github.com/prometheus/client_golang/prometheus"

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
}

// NewMetrics creates the worker's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sekali_duplicate_detected_total",
			Help: "Duplicates caught before they caused a second e-mail, by the layer that caught them.",
		}, []string{"layer"}),
		lockAcquired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sekali_lock_acquire_success_total",
			Help: "Redis delivery locks acquired.",
		}),
		lockFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sekali_lock_acquire_failed_total",
			Help: "Redis delivery locks found held by another worker.",
		}),
		lockExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sekali_lock_expired_before_completion_total",
			Help: "Attempts whose Redis lock expired before they finished: LOCK_TTL is too short for the provider's latency.",
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sekali_job_retry_total",
			Help: "Task attempts that ended in a retry, by reason.",
		}, []string{"reason"}),
		processing: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sekali_job_processing_duration_seconds",
			Help:    "Time to handle one delivery task, whatever its outcome.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sekali_deliveries_total",
			Help: "Delivery attempts by template and outcome: sent, failed, retried, ambiguous.",
		}, []string{"template", "outcome"}),
		batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sekali_statement_batch_size",
			Help:    "Attempts served by one statement, by statement (claim, hand_over, sent): those that reached it while the previous one ran.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}, []string{"statement"}),
		sendLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sekali_provider_send_duration_seconds",
			Help:    "Time the mail provider took to take (or refuse) one message.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		blocked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sekali_deliveries_blocked_total",
			Help: "Tasks not sent because an operator's block on the key or recipient applied.",
		}),
		handedBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sekali_tasks_handed_back_total",
			Help: "Tasks this worker gave back to the queue without an attempt: provider_unavailable (the provider refuses us, or the one a delivery is pinned to does), unknown_template (an older worker during a rolling deploy), pinned_to_missing_provider (a delivery pinned to a provider not in PROVIDERS: an operator must decide), shutdown.",
		}, []string{"reason"}),
		providerUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sekali_provider_up",
			Help: "1 while this provider takes mail from this worker, 0 while it refuses our session (connect, TLS, AUTH, sender, throttling) and the worker only probes it; with PROVIDERS, the next provider that is up takes the mail meanwhile.",
		}, []string{"provider"}),
	}
	// Known label values exist from the start, so that a rate() alert
	// fires on the first event.
	for _, r := range []string{"provider_unavailable", "unknown_template", string(resultPinnedMissing), "shutdown"} {
		m.handedBack.WithLabelValues(r)
	}
	for _, l := range []string{"cache", "database", "lock", "fencing"} {
		m.duplicates.WithLabelValues(l)
	}
	for _, r := range []string{"smtp_4xx", "smtp_5xx", "http_4xx", "http_5xx", "deferred", "provider_unavailable", "lock_busy", "lock_expired", "database", "redis"} {
		m.retries.WithLabelValues(r)
	}
	reg.MustRegister(m.duplicates, m.lockAcquired, m.lockFailed, m.lockExpired, m.retries, m.processing, m.deliveries, m.sendLatency, m.blocked,
		m.handedBack, m.providerUp, m.batchSize)
	return m
}

// deliveryOutcomes are the outcome label values of sekali_deliveries_total.
var deliveryOutcomes = []string{"sent", "failed", "retried", "held", "ambiguous", "suppressed"}

// knowTemplates creates the series of every template and outcome, at zero.
func (m *Metrics) knowTemplates(names []string) {
	for _, t := range names {
		for _, o := range deliveryOutcomes {
			m.deliveries.WithLabelValues(t, o)
		}
	}
}
