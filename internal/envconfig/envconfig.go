// Package envconfig reads a binary's configuration from environment
// variables, collecting every missing or invalid one so that a bad
// deployment is told all that is wrong in one go.
package envconfig

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// Reader reads variables through getenv and remembers what was wrong.
type Reader struct {
	getenv func(string) string
	errs   []error
}

// New returns a Reader over getenv (os.Getenv in production).
func New(getenv func(string) string) *Reader {
	return &Reader{getenv: getenv}
}

// Err reports every problem met so far, or nil.
func (r *Reader) Err() error {
	return errors.Join(r.errs...)
}

func (r *Reader) fail(name, value, want string) {
	r.errs = append(r.errs, fmt.Errorf("%s=%q: %s", name, value, want))
}

// String returns the variable, or def when it is unset or empty.
func (r *Reader) String(name, def string) string {
	if v := strings.TrimSpace(r.getenv(name)); v != "" {
		return v
	}
	return def
}

// Secret reads a variable that may hold a secret: NAME itself, or, when
// NAME is unset, the contents of the file named by NAME_FILE (as Docker
// and Kubernetes secrets are mounted), without its trailing newline.
func (r *Reader) Secret(name, def string) string {
	if v := strings.TrimSpace(r.getenv(name)); v != "" {
		return v
	}
	path := strings.TrimSpace(r.getenv(name + "_FILE"))
	if path == "" {
		return def
	}
	b, err := os.ReadFile(path)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s_FILE: %w", name, err))
		return def
	}
	return strings.TrimRight(string(b), "\r\n")
}

// Duration reads a Go duration such as "250ms" or "24h" that must be positive.
func (r *Reader) Duration(name string, def time.Duration) time.Duration {
	return parsed(r, name, def, time.ParseDuration, func(d time.Duration) bool { return d > 0 },
		"want a positive duration such as 30s or 24h")
}

// DurationOrZero reads a duration that may also be zero ("0", "0s",
// "0h"), which means "off" for the variables that take it.
func (r *Reader) DurationOrZero(name string, def time.Duration) time.Duration {
	return parsed(r, name, def, time.ParseDuration, func(d time.Duration) bool { return d >= 0 },
		"want 0 (off) or a positive duration such as 30s or 24h")
}

// Int reads a whole number within [lo, hi].
func (r *Reader) Int(name string, def, lo, hi int) int {
	return parsed(r, name, def, strconv.Atoi, func(n int) bool { return n >= lo && n <= hi },
		fmt.Sprintf("want a whole number from %d to %d", lo, hi))
}

// Float reads a number within [lo, hi] (a fraction allowed: 0.5).
func (r *Reader) Float(name string, def, lo, hi float64) float64 {
	parseFloat := func(v string) (float64, error) { return strconv.ParseFloat(v, 64) }
	return parsed(r, name, def, parseFloat, func(f float64) bool { return f >= lo && f <= hi },
		fmt.Sprintf("want a number from %g to %g", lo, hi))
}

// parsed is the variable name as parse reads it, def when it is unset,
// and def with want reported when parse refuses it or ok does not take
// what parse made of it.
func parsed[T any](r *Reader, name string, def T, parse func(string) (T, error), ok func(T) bool, want string) T {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil || !ok(x) {
		r.fail(name, v, want)
		return def
	}
	return x
}

// OneOf reads a value that must be one of allowed (compared case-insensitively,
// returned in lower case).
func (r *Reader) OneOf(name, def string, allowed ...string) string {
	v := strings.ToLower(strings.TrimSpace(r.getenv(name)))
	if v == "" {
		return def
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	r.fail(name, v, "want one of "+strings.Join(allowed, ", "))
	return def
}

// Prefixes reads a comma-separated list of CIDRs (none when unset); a
// CIDR that does not parse is reported with example as what to write.
func (r *Reader) Prefixes(name, example string) []netip.Prefix {
	var out []netip.Prefix
	for _, cidr := range strings.Split(r.getenv(name), ",") {
		if cidr = strings.TrimSpace(cidr); cidr == "" {
			continue
		}
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			r.Check(name, fmt.Errorf("%q: want CIDRs such as %s", cidr, example))
			continue
		}
		out = append(out, p)
	}
	return out
}

// LogLevel reads debug, info, warn or error.
func (r *Reader) LogLevel(name string) slog.Level {
	switch r.OneOf(name, "info", "debug", "info", "warn", "error") {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// Check records a problem found by a caller's own validation of name,
// and says whether there was none. An error that begins with the
// variable's name already ("RESEND_WEBHOOK_SECRET: want …",
// "POSTMARK_WEBHOOK_PASSWORD must have …") is not prefixed twice.
func (r *Reader) Check(name string, err error) bool {
	switch {
	case err == nil:
		return true
	case strings.HasPrefix(err.Error(), name+":"), strings.HasPrefix(err.Error(), name+" "):
		r.errs = append(r.errs, err)
	default:
		r.errs = append(r.errs, fmt.Errorf("%s: %w", name, err))
	}
	return false
}
