package httpapi

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sekali-dev/sekali/internal/notify"
)

// The overview's pace: each paced provider's budget as every worker
// shares it, in words, for the operator who must tell "the provider is
// slow" from "the provider holds us" (runbook: the providers' pace).

// paceRow is one paced provider's budget as the overview shows it.
type paceRow struct {
	Provider   string
	Configured string // "5/s, burst 1"
	InForce    string // "5/s", or the lower rate the provider announced and until when
	Lower      bool   // the rate in force is below the configured one
	Paused     string // "until 03:12:04 UTC (28 s left)", "" when not paused
	Reason     string // what the provider said, while paused
	Quota      string // "1,234 of 50,000 (2%) in 24 h", "none"
	QuotaSpent bool   // nothing of the quota is left
	Note       string // the workers disagree, or the budget could not be read
}

// newPaceRows describes the paced providers of ps, at now.
func newPaceRows(ps []notify.ProviderSummary, now time.Time) []paceRow {
	var rows []paceRow
	for _, p := range ps {
		pc := p.Pace
		if pc == nil {
			continue
		}
		r := paceRow{Provider: p.Name, Configured: perSecond(pc.Rate) + ", burst " + strconv.Itoa(max(pc.Burst, 1)), InForce: perSecond(pc.EffectiveRate), Quota: "none"}
		if pc.Rate == 0 {
			r.Configured = "no rate: paused when the provider asks"
		}
		if pc.EffectiveRate == 0 {
			r.InForce = "none"
		}
		if pc.EffectiveRate > 0 && (pc.Rate == 0 || pc.EffectiveRate < pc.Rate) {
			r.Lower = true
			r.InForce += ", the provider's limit"
			if !pc.LowerUntil.IsZero() {
				r.InForce += " (until " + pc.LowerUntil.UTC().Format("15:04 MST") + ", unless it says so again)"
			}
		}
		if pc.Paused() {
			r.Paused = "until " + pc.PausedUntil.UTC().Format("15:04:05 MST") + " (" + left(pc.PausedUntil.Sub(now)) + ")"
			r.Reason = pc.PauseReason
		}
		if pc.Quota > 0 {
			window := "24 h"
			if pc.QuotaWindowSeconds > 0 {
				window = lasted(time.Duration(pc.QuotaWindowSeconds) * time.Second)
			}
			r.Quota = fmt.Sprintf("%s of %s (%d%%) in %s", thousands(pc.QuotaUsed), thousands(pc.Quota), pc.QuotaUsed*100/pc.Quota, window)
			r.QuotaSpent = pc.QuotaUsed >= pc.Quota
		}
		switch {
		case pc.Error != "":
			r.InForce, r.Quota = "not known", "not known"
			r.Note = "Its budget could not be read: " + pc.Error
		case pc.ConfigsDiffer:
			r.Note = "The workers are not all configured alike (GET /admin/v1/queue shows each one's pace); this is the first one's."
		}
		rows = append(rows, r)
	}
	return rows
}

// perSecond says a rate of requests a second: "5/s", "0.5/s".
func perSecond(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) + "/s" }

// left says how long is left of d: "28 s left", "12 min left".
func left(d time.Duration) string {
	switch {
	case d <= 0:
		return "ending now"
	case d < time.Minute:
		return fmt.Sprintf("%d s left", int(d.Round(time.Second)/time.Second))
	}
	return lasted(d) + " left"
}
