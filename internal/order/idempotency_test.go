package order

import (
	"errors"
	"testing"
	"time"
)

// What an earlier use of an Idempotency-Key means (priorUse), the one
// rule of the checkout's statement and of the trigger's look-up: while
// its record lives, the same request replays and another is refused; at
// its expiry, to the microsecond, it is forgotten, whatever the request.
func TestPriorUseOfAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	expires := time.Date(2026, 12, 1, 9, 15, 0, 0, time.UTC)
	same, other := []byte("fingerprint of the checkout"), []byte("fingerprint of another")
	for _, tt := range []struct {
		name       string
		now        time.Time
		hash       []byte
		wantReplay bool
		wantErr    error
	}{
		{"the same request, live", expires.Add(-time.Microsecond), same, true, nil},
		{"another request, live", expires.Add(-time.Microsecond), other, false, ErrKeyReused},
		{"the same request, at its expiry", expires, same, false, nil},
		{"another request, at its expiry", expires, other, false, nil},
		{"another request, long after", expires.Add(48 * time.Hour), other, false, nil},
		{"a request without a fingerprint, live", expires.Add(-time.Hour), nil, false, ErrKeyReused},
	} {
		replay, err := priorUse(expires, same, tt.hash, tt.now)
		if replay != tt.wantReplay || !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
			t.Errorf("%s: replay %v, %v; want %v, %v", tt.name, replay, err, tt.wantReplay, tt.wantErr)
		}
	}
}
