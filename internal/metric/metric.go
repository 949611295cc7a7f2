// Package metric makes and registers the Prometheus series the binaries
// export, in one call each. A vector's series for the label values it is
// known to take are created at zero from the start (Known), so that a
// dashboard shows them and a rate() or increase() alert fires on the
// first event, not on the second: a series that appears with the event
// has no earlier sample to rise from.
package metric

import "github.com/prometheus/client_golang/prometheus"

// Counter makes and registers a counter.
func Counter(reg prometheus.Registerer, name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	reg.MustRegister(c)
	return c
}

// CounterVec makes and registers a counter by labels, with the series of
// every combination of known's values at zero: known[i] lists the values
// of labels[i] (Known).
func CounterVec(reg prometheus.Registerer, name, help string, labels []string, known ...[]string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	reg.MustRegister(c)
	Known(c, known...)
	return c
}

// Gauge makes and registers a gauge.
func Gauge(reg prometheus.Registerer, name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	reg.MustRegister(g)
	return g
}

// GaugeVec makes and registers a gauge by labels.
func GaugeVec(reg prometheus.Registerer, name, help string, labels []string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	reg.MustRegister(g)
	return g
}

// Histogram makes and registers a histogram with buckets.
func Histogram(reg prometheus.Registerer, name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	reg.MustRegister(h)
	return h
}

// HistogramVec makes and registers a histogram with buckets, by labels.
func HistogramVec(reg prometheus.Registerer, name, help string, buckets []float64, labels []string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	reg.MustRegister(h)
	return h
}

// Known creates, at zero, the series of c for every combination of
// values: values[i] lists the values of c's i-th label, one list for
// each label, or none at all (a vector whose label values are not known
// ahead, such as an endpoint's id, leaves its series to appear when they
// occur). A list for some labels only is a bug in the caller: Known
// panics, at start-up, as MustRegister does.
func Known(c *prometheus.CounterVec, values ...[]string) {
	if len(values) == 0 {
		return
	}
	var each func(prefix []string, rest [][]string)
	each = func(prefix []string, rest [][]string) {
		if len(rest) == 0 {
			if _, err := c.GetMetricWithLabelValues(prefix...); err != nil {
				panic("metric: " + err.Error()) // a wrong number of labels: a bug in the caller
			}
			return
		}
		for _, v := range rest[0] {
			each(append(prefix[:len(prefix):len(prefix)], v), rest[1:])
		}
	}
	each(nil, values)
}

// Latency is the buckets of a time that runs from a millisecond to half
// a minute: a request, a task, a provider's answer.
var Latency = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
