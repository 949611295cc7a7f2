package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/resend/resendtest"
)

func TestParseBatches(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{"off,on", []string{"off", "on"}, false},
		{"on", []string{"on"}, false},
		{" on , off ", []string{"on", "off"}, false},
		{"on,on", []string{"on"}, false},
		{"", nil, true},
		{"true", nil, true},
		{"off,", nil, true},
	} {
		got, err := parseBatches(tc.in)
		if (err != nil) != tc.err || strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("parseBatches(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// The provider-bound mode's flags are refused before anything starts.
func TestProviderFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-provider", "postmark"}, "resend only"},
		{[]string{"-provider", "resend", "-provider-rate", "0"}, "-provider-rate 0"},
		{[]string{"-provider", "resend", "-orders", "0"}, "-orders 0"},
		{[]string{"-provider", "resend", "-workers", "0"}, "-workers 0"},
		{[]string{"-provider", "resend", "-provider-batches", "maybe"}, "-provider-batches"},
	} {
		err := run(context.Background(), tc.args, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench %s: %v, want an error naming %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// A run is measured off the stand-in: refusals against all the requests
// its limit counted, the pace over the span of those it admitted, the
// e-mails a request carried (a batch by its key, a lone e-mail each its
// own), duplicates by Message-ID, and the time until the last e-mail.
func TestProviderRunIsMeasuredOffTheStandIn(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	arrivals := []resendtest.Arrival{{At: at(100)}, {At: at(300)}, {At: at(350), Refused: true}, {At: at(500)}, {At: at(900)}}
	msgs := []resendtest.Message{
		{MessageID: "a", SentAt: at(100)},
		{MessageID: "b", IdempotencyKey: "batch-1", Batched: true, SentAt: at(300)},
		{MessageID: "c", IdempotencyKey: "batch-1", Batched: true, SentAt: at(300)},
		{MessageID: "d", IdempotencyKey: "batch-1", Batched: true, SentAt: at(300)},
		{MessageID: "e", IdempotencyKey: "batch-2", Batched: true, SentAt: at(500)},
		{MessageID: "e", SentAt: at(900)}, // the same message again
	}
	r := providerRun{batches: "on", orders: 5}
	r.measure(arrivals, msgs, start)
	if r.requests != 5 || r.refused != 1 || r.admitted != 4 || r.span != 800*time.Millisecond {
		t.Errorf("requests %d, refused %d, admitted %d, span %s; want 5, 1, 4, 800ms", r.requests, r.refused, r.admitted, r.span)
	}
	if r.emails != 6 || r.maxBatch != 3 || r.duplicates != 1 || r.allSent != 900*time.Millisecond {
		t.Errorf("e-mails %d, most a request %d, duplicates %d, all sent in %s; want 6, 3, 1, 900ms", r.emails, r.maxBatch, r.duplicates, r.allSent)
	}
	// 4 admitted over 0.8 s: 3 intervals, 3.75/s, 75% of 5/s.
	if p := r.pace(5); p < 0.749 || p > 0.751 {
		t.Errorf("pace %.3f, want 0.75", p)
	}
	if s := r.refusedShare(); s != 0.2 {
		t.Errorf("refused share %v, want 0.2", s)
	}
	if p := r.perRequest(); p != 1.5 {
		t.Errorf("e-mails a request %v, want 1.5", p)
	}

	var w strings.Builder
	providerTable(&w, 5, []providerRun{r, {batches: "off"}})
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("the table has %d lines, want a header, its rule and two rows:\n%s", len(lines), w.String())
	}
	if want := "| on | 5 | 0.0 s | 0.9 s | 5 | 1 (20.0%) | 3.75/s (75%) | 1.5 (3) | 0 | 0 | 1 |"; lines[2] != want {
		t.Errorf("row\n%s\nwant\n%s", lines[2], want)
	}
	// A run with nothing admitted has no pace, and divides by nothing.
	if want := "| off | 0 | 0.0 s | 0.0 s | 0 | 0 (0.0%) | 0.00/s (0%) | 0.0 (0) | 0 | 0 | 0 |"; lines[3] != want {
		t.Errorf("row\n%s\nwant\n%s", lines[3], want)
	}
}
