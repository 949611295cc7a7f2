package httpprovider

import (
	"fmt"
	"time"
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
