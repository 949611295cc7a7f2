package notify

import (
	"context"
	"fmt"
	"time"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
)

// Minute is what the history (delivery_events) recorded in one minute,
// by what each row did to its delivery (db/queries/console.sql). Counts
// are of history rows: a delivery deferred twice in a minute counts
// twice there.
type Minute struct {
	Start      time.Time // the minute's first instant, in UTC
	Received   int       // deliveries recorded (→ pending)
	Sent       int       // → sent: by a worker, the reconciler or an operator's mark-sent
	Deferred   int       // sending → pending: an attempt that left it to be tried again
	Failed     int       // → failed: refused for good, or expired
	Held       int       // → held: for an operator
	Suppressed int       // → suppressed
	Cancelled  int       // → cancelled
}

// HourMinutes is how many minutes LastHour returns.
const HourMinutes = 60

// lastHourTimeout bounds the read. It costs about a microsecond per
// history row of the hour (docs/runbook.md, "The console"); an hour far
// busier than any shop's gives up with an error rather than hold a
// connection of the pool while the console's operator waits.
const lastHourTimeout = 5 * time.Second

// LastHour returns the hour up to now, minute by minute, oldest first:
// HourMinutes minutes of UTC, the last one the minute now is in (so
// far), each one there even when nothing happened in it. It reads the
// history's index by time (delivery_events_flow_idx): the hour's rows,
// however long the history.
func LastHour(ctx context.Context, db DB, now time.Time) ([]Minute, error) {
	start := now.UTC().Truncate(time.Minute).Add(-(HourMinutes - 1) * time.Minute)
	end := start.Add(HourMinutes * time.Minute)
	ctx, cancel := context.WithTimeout(ctx, lastHourTimeout)
	defer cancel()
	rows, err := dbsqlc.New(db).CountHistoryByMinute(ctx, dbsqlc.CountHistoryByMinuteParams{Since: start, Until: end})
	if err != nil {
		return nil, fmt.Errorf("the history's last hour: %w", err)
	}
	out := make([]Minute, HourMinutes)
	for i := range out {
		out[i].Start = start.Add(time.Duration(i) * time.Minute)
	}
	for _, r := range rows {
		i := int(r.Minute.Sub(start) / time.Minute)
		if i < 0 || i >= HourMinutes || !r.Minute.Equal(out[i].Start) {
			return nil, fmt.Errorf("the history's last hour: a row for %s, not a minute from %s", r.Minute, start)
		}
		out[i] = Minute{Start: out[i].Start, Received: int(r.Received), Sent: int(r.Sent), Deferred: int(r.Deferred),
			Failed: int(r.Failed), Held: int(r.Held), Suppressed: int(r.Suppressed), Cancelled: int(r.Cancelled)}
	}
	return out, nil
}

// LastHour is LastHour on the operator's database.
func (o *Operator) LastHour(ctx context.Context, now time.Time) ([]Minute, error) {
	return LastHour(ctx, o.db, now)
}

// TestRecordedSince counts test mode's notifications recorded since
// since, which LastHour leaves out.
func (o *Operator) TestRecordedSince(ctx context.Context, since time.Time) (int, error) {
	n, err := dbsqlc.New(o.db).CountTestRecordedSince(ctx, since)
	if err != nil {
		return 0, fmt.Errorf("count test notifications: %w", err)
	}
	return int(n), nil
}
