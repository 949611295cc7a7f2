package binary_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/sekali-dev/sekali/internal/binary"
	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/postgres"
)

// The settings every binary reads: their defaults, the binary's own
// METRICS_ADDR, and each bad value reported with the binary's others.
func TestReadCommon(t *testing.T) {
	t.Parallel()
	env := envconfig.New(func(string) string { return "" })
	c := binary.ReadCommon(env, ":9101")
	if err := env.Err(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c.DatabaseURL != postgres.DefaultURL || c.Queue != notify.DefaultQueue || c.MetricsAddr != ":9101" || c.PprofAddr != "" ||
		c.LogLevel != slog.LevelInfo || c.Redis == nil {
		t.Errorf("defaults: %+v", c)
	}
	bad := map[string]string{"REDIS_URL": "http://localhost:6379", "LOG_LEVEL": "chatty", "METRICS_ADDR": ":9200"}
	env = envconfig.New(func(k string) string { return bad[k] })
	c = binary.ReadCommon(env, ":9101")
	err := env.Err()
	for _, name := range []string{"REDIS_URL", "LOG_LEVEL"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v does not name %s", err, name)
		}
	}
	if c.MetricsAddr != ":9200" {
		t.Errorf("METRICS_ADDR set: %q, want :9200", c.MetricsAddr)
	}
}
