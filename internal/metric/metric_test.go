package metric_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sekali-dev/sekali/internal/metric"
)

// A vector's known series exist at zero before any event, every
// combination of its labels' values; one registered twice is refused,
// as Prometheus refuses it.
func TestKnownSeriesExistAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := metric.CounterVec(reg, "sekali_test_total", "Test events.", []string{"provider", "result"},
		[]string{"resend", "smtp"}, []string{"sent", "failed", "retried"})
	if n := testutil.CollectAndCount(c); n != 6 {
		t.Errorf("%d series before any event, want the 6 combinations", n)
	}
	want := `
# HELP sekali_test_total Test events.
# TYPE sekali_test_total counter
sekali_test_total{provider="resend",result="failed"} 0
sekali_test_total{provider="resend",result="retried"} 0
sekali_test_total{provider="resend",result="sent"} 1
sekali_test_total{provider="smtp",result="failed"} 0
sekali_test_total{provider="smtp",result="retried"} 0
sekali_test_total{provider="smtp",result="sent"} 0
`
	c.WithLabelValues("resend", "sent").Inc()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sekali_test_total"); err != nil {
		t.Error(err)
	}
	unknown := metric.CounterVec(reg, "sekali_test_by_endpoint_total", "By endpoint.", []string{"endpoint"})
	if n := testutil.CollectAndCount(unknown); n != 0 {
		t.Errorf("%d series of a vector whose values are not known ahead, want none", n)
	}
	defer func() {
		if recover() == nil {
			t.Error("a second registration of the same name was taken")
		}
	}()
	metric.Counter(reg, "sekali_test_total", "Again.")
}

// Known values for some labels only are a bug, told at once.
func TestKnownRefusesValuesForSomeLabels(t *testing.T) {
	t.Parallel()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a", "b"})
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "metric:") {
			t.Errorf("recovered %v, want the metric package's panic", r)
		}
	}()
	metric.Known(c, []string{"only-a"})
}
