package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/ses/sestest"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// A provider that says its account's limits (SES's GetAccount) is paced
// within them from the start: unpaced by configuration, it is paced at
// the account's rate and daily quota; a configured rate above the
// account's is lowered to it, one below stands. The start-up line says
// which pace is in force. Not parallel: the AWS SDK reads its
// credentials from the process's environment.
func TestTheAccountsLimitsPaceAProvider(t *testing.T) {
	srv := sestest.NewServer("eu-west-1")
	t.Cleanup(srv.Close)
	srv.SetSendQuota(3, 1000)
	dir := t.TempDir()
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey,
		"AWS_SESSION_TOKEN": "", "AWS_PROFILE": "", "AWS_REGION": "", "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials")} {
		t.Setenv(k, v)
	}
	w := newWorld(t, smtpsink.Config{})
	for _, c := range []struct {
		configured []string
		want       string
	}{
		{nil, `"pace":"ses 3/s, burst 1, 1000 per 24h0m0s"`},
		{[]string{"SES_RATE", "20", "SES_DAILY_QUOTA", "5000"}, `"pace":"ses 3/s, burst 1, 1000 per 24h0m0s"`},
		{[]string{"SES_RATE", "0.5", "SES_DAILY_QUOTA", "200"}, `"pace":"ses 0.5/s, burst 1, 200 per 24h0m0s"`},
	} {
		env := w.env(append([]string{"PROVIDER", "ses", "SES_REGION", srv.Region, "SES_ENDPOINT", srv.URL}, c.configured...)...)
		run := testenv.StartRun(t, run, env)
		testenv.WaitFor(t, "the worker's start-up line", 30*time.Second, func() bool {
			return strings.Contains(run.Logs.String(), `"msg":"worker started"`)
		})
		logs := run.Logs.String()
		if !strings.Contains(logs, c.want) {
			t.Errorf("configured %v, account 3/s and 1000 a day: want %s in\n%s", c.configured, c.want, logs)
		}
		if lowered := strings.Contains(logs, "paced within the provider's account limits"); lowered == strings.Contains(c.want, "0.5/s") {
			t.Errorf("configured %v: the log says the pace was lowered: %v", c.configured, lowered)
		}
		if err := run.Stop(t, 30*time.Second); err != nil {
			t.Errorf("run = %v", err)
		}
	}
}
