package worker

import (
	"log/slog"
	"testing"

	"github.com/sekali-dev/sekali/internal/mail"
)

// A deferral is counted, and its answer logged, under the protocol it
// came in: an HTTP provider's 503 is no SMTP code.
func TestDeferralsAreNamedForTheirProtocol(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		r      mail.Reply
		reason string
		keys   []string
	}{
		{mail.SMTPReply(451, "4.7.1"), "smtp_4xx", []string{"smtp_code", "smtp_enhanced"}},
		{mail.SMTPReply(552, ""), "smtp_5xx", []string{"smtp_code"}},
		{mail.HTTPStatus(429), "http_4xx", []string{"http_status"}},
		{mail.HTTPStatus(503), "http_5xx", []string{"http_status"}},
		{mail.HTTPStatus(200), "http_4xx", []string{"http_status"}},
		{mail.Reply{}, "deferred", nil},
	} {
		if got := deferredReason(tt.r); got != tt.reason {
			t.Errorf("deferredReason(%v) = %q, want %q", tt.r, got, tt.reason)
		}
		attrs := replyAttrs(tt.r)
		if len(attrs) != len(tt.keys) {
			t.Errorf("replyAttrs(%v) = %v, want keys %v", tt.r, attrs, tt.keys)
			continue
		}
		for i, a := range attrs {
			if a.Key != tt.keys[i] || a.Value.Kind() == slog.KindAny {
				t.Errorf("replyAttrs(%v)[%d] = %v, want %s", tt.r, i, a, tt.keys[i])
			}
		}
	}
}
