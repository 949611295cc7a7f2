package mail

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// retryIn is "try again in 92 seconds" (or minutes, hours).
var retryIn = regexp.MustCompile(`(?i)try again in (\d{1,6}) ?(second|sec|minute|min|hour)`)

// PauseNamed is the wait a provider's refusal for pace names in its
// text, over SMTP or HTTP alike: "try again after Sun, 05 Oct 2025
// 19:22:44 UTC" (Mailgun's, in its API's message and its SMTP reply) or
// "try again in 92 seconds"; 0 when it names none, or a time past.
func PauseNamed(text string, now time.Time) time.Duration {
	const after = "try again after "
	if i := strings.Index(strings.ToLower(text), after); i >= 0 {
		date := strings.TrimSpace(text[i+len(after):])
		for _, layout := range []string{time.RFC1123, time.RFC1123Z} {
			if len(date) >= len(layout) {
				if t, err := time.Parse(layout, date[:len(layout)]); err == nil {
					return max(t.Sub(now), 0)
				}
			}
		}
	}
	if m := retryIn.FindStringSubmatch(text); m != nil {
		n, _ := strconv.Atoi(m[1])
		unit := time.Second
		switch strings.ToLower(m[2]) {
		case "minute", "min":
			unit = time.Minute
		case "hour":
			unit = time.Hour
		}
		return time.Duration(n) * unit
	}
	return 0
}
