package main

import (
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mailtemplate"
)

// Retention keeps what is younger than the workers' DELIVERY_MAX_AGE, so
// the reconciler reads the same variable, with the workers' default.
func TestRetentionUsesDeliveryMaxAge(t *testing.T) {
	t.Parallel()
	templates, err := mailtemplate.LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]time.Duration{"": 120 * time.Hour, "48h": 48 * time.Hour} {
		env := map[string]string{"DELIVERY_MAX_AGE": v, "DELIVERY_RETENTION": "2160h"}
		cfg, err := loadConfig(func(k string) string { return env[k] }, templates)
		if err != nil || cfg.Reconcile.MaxAge != want {
			t.Errorf("DELIVERY_MAX_AGE=%q: max age %v (%v), want %v", v, cfg.Reconcile.MaxAge, err, want)
		}
	}
}
