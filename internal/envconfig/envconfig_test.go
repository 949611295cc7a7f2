package envconfig

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReaderReportsEveryProblemAtOnce(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"GOOD_DURATION": "250ms",
		"BAD_DURATION":  "soon",
		"NEG_DURATION":  "-1s",
		"GOOD_INT":      "8",
		"BIG_INT":       "1000",
		"LEVEL":         "WARN",
		"BAD_LEVEL":     "loud",
	}
	r := New(func(k string) string { return env[k] })

	if got := r.Duration("GOOD_DURATION", time.Second); got != 250*time.Millisecond {
		t.Errorf("GOOD_DURATION = %v", got)
	}
	if got := r.Duration("UNSET", 3*time.Second); got != 3*time.Second {
		t.Errorf("UNSET duration = %v, want the default", got)
	}
	r.Duration("BAD_DURATION", time.Second)
	r.Duration("NEG_DURATION", time.Second)
	if got := r.Int("GOOD_INT", 1, 1, 64); got != 8 {
		t.Errorf("GOOD_INT = %d", got)
	}
	r.Int("BIG_INT", 1, 1, 64)
	if got := r.LogLevel("LEVEL"); got != slog.LevelWarn {
		t.Errorf("LEVEL = %v", got)
	}
	r.LogLevel("BAD_LEVEL")
	if got := r.String("UNSET", "fallback"); got != "fallback" {
		t.Errorf("String default = %q", got)
	}

	err := r.Err()
	if err == nil {
		t.Fatal("Err() = nil, want the four bad variables")
	}
	var named []string
	for _, line := range strings.Split(err.Error(), "\n") {
		named = append(named, line[:strings.IndexByte(line, '=')])
	}
	want := []string{"BAD_DURATION", "NEG_DURATION", "BIG_INT", "BAD_LEVEL"}
	if strings.Join(named, " ") != strings.Join(want, " ") {
		t.Errorf("Err() names %v, want exactly %v", named, want)
	}
}

func TestSecretFromFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"A_FILE": file, "B": "direct", "B_FILE": file, "C_FILE": "/does/not/exist"}
	r := New(func(k string) string { return env[k] })
	if got := r.Secret("A", ""); got != "s3cret-token" {
		t.Errorf("from file: %q", got)
	}
	if got := r.Secret("B", ""); got != "direct" {
		t.Errorf("the variable wins over the file: %q", got)
	}
	if got := r.Secret("D", "default"); got != "default" {
		t.Errorf("default: %q", got)
	}
	r.Secret("C", "")
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "C_FILE") {
		t.Errorf("an unreadable file: %v", err)
	}
}

// A list of CIDRs: blanks are passed over, each bad one is named.
func TestPrefixes(t *testing.T) {
	t.Parallel()
	r := New(func(string) string { return " 10.0.0.0/8, ,::1/128,nope,192.168.1.300/32" })
	got := r.Prefixes("ALLOWED", "10.20.0.0/16")
	if len(got) != 2 || got[0].String() != "10.0.0.0/8" || got[1].String() != "::1/128" {
		t.Errorf("Prefixes = %v", got)
	}
	err := r.Err()
	for _, want := range []string{`ALLOWED: "nope": want CIDRs such as 10.20.0.0/16`, `"192.168.1.300/32"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Err() = %v, want it to say %s", err, want)
		}
	}
	if p := New(func(string) string { return "" }).Prefixes("ALLOWED", "x"); p != nil {
		t.Errorf("unset: %v", p)
	}
}
