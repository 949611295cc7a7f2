package httpprovider

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/mail"
)

// A look-up (mail.Lookup) may say "not there" only when the
// provider still keeps what it searches and has had time to make a send
// searchable. These two checks say when; each provider names its
// retention and settle margin, and its own errors.

// CheckRetention, before a search, refuses a send handed over at (zero:
// not known) more than retention before now: the provider no longer
// keeps it, so a miss would say nothing. The error wraps errOutside.
func CheckRetention(at, now time.Time, retention time.Duration, errOutside error) error {
	if !at.IsZero() && now.Sub(at) > retention {
		return fmt.Errorf("%w (%s, handed over %s ago)", errOutside, retention, now.Sub(at).Round(time.Minute))
	}
	return nil
}

// CheckMiss, after a search that did not find a send handed over at,
// says whether the miss can be believed: nil when at is known and at
// least settle before now. A send too recent gives an error wrapping
// errTooRecent; one without a hand-over time an error that name (the
// provider, as in its other errors) begins.
func CheckMiss(name string, at, now time.Time, settle time.Duration, errTooRecent error) error {
	switch {
	case at.IsZero():
		return fmt.Errorf("%s: not found, but without a hand-over time there is no telling whether it is too recent or too old to be found", name)
	case now.Sub(at) < settle:
		return fmt.Errorf("%w (handed over %s ago, settle %s)", errTooRecent, now.Sub(at).Round(time.Second), settle)
	}
	return nil
}

// Search is a look-up's Find around search, the provider's own: a send
// whose earliest unknown attempt (q.From) was handed over before w's
// retention is refused without one (CheckRetention, errOutside), and a
// miss is believed only once the latest is w's settle margin old
// (CheckMiss, errTooRecent; name begins its other error).
// search is given the time both checks count from.
func Search(ctx context.Context, name string, q mail.Query, w Window, errOutside, errTooRecent error,
	search func(ctx context.Context, q mail.Query, now time.Time) (id string, found bool, err error),
) (string, bool, error) {
	now := time.Now()
	if err := CheckRetention(q.From(), now, w.Retention, errOutside); err != nil {
		return "", false, err
	}
	id, found, err := search(ctx, q, now)
	if err != nil || found {
		return id, found, err
	}
	if err := CheckMiss(name, q.HandedOverAt, now, w.Settle, errTooRecent); err != nil {
		return "", false, err
	}
	return "", false, nil
}

// Window is what a look-up may trust of a provider's search: how long
// the provider keeps messages (Retention), and how old a send must be
// before a miss is believed (Settle). Zero takes the provider's
// defaults (Or).
type Window struct {
	Retention time.Duration // <PROVIDER>_RETENTION
	Settle    time.Duration // <PROVIDER>_LOOKUP_SETTLE
}

// ReadWindow reads prefix+"_RETENTION" and prefix+"_LOOKUP_SETTLE".
func ReadWindow(env *envconfig.Reader, prefix string) Window {
	return Window{Retention: env.DurationOrZero(prefix+"_RETENTION", 0), Settle: env.DurationOrZero(prefix+"_LOOKUP_SETTLE", 0)}
}

// Problems says what is wrong with w, the variables named by prefix:
// a negative duration, or a retention past maxRetention (when set).
func (w Window) Problems(prefix string, maxRetention time.Duration) []error {
	var errs []error
	switch {
	case w.Retention < 0:
		errs = append(errs, fmt.Errorf("%s_RETENTION %s must not be negative", prefix, w.Retention))
	case maxRetention > 0 && w.Retention > maxRetention:
		errs = append(errs, fmt.Errorf("%s_RETENTION %s: want the provider's retention, at most %s", prefix, w.Retention, maxRetention))
	}
	if w.Settle < 0 {
		errs = append(errs, fmt.Errorf("%s_LOOKUP_SETTLE %s must not be negative", prefix, w.Settle))
	}
	return errs
}

// Or is w with its zero fields taken from def.
func (w Window) Or(def Window) Window {
	return Window{Retention: cmp.Or(w.Retention, def.Retention), Settle: cmp.Or(w.Settle, def.Settle)}
}

// Get runs one request of a look-up's search, GET target (Do), and
// decodes its answer into v. Only a 200 with JSON is an answer a
// look-up can read; its errors say what came instead: none (the
// request's failure), another status, or a body that is not JSON, each
// with the start of the body.
func (c *Client) Get(ctx context.Context, target string, v any) error {
	ans, se := c.Do(ctx, http.MethodGet, target, nil, nil)
	if se != nil {
		return se.Err
	}
	if ans.Status != http.StatusOK {
		return fmt.Errorf("answered %d: %s", ans.Status, Truncate(ans.Body))
	}
	if err := json.Unmarshal(ans.Body, v); err != nil {
		return fmt.Errorf("not JSON: %q", Truncate(ans.Body))
	}
	return nil
}
