package httpapi

import (
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// The client is the connection's peer, unless that peer is a trusted
// proxy; then the last X-Forwarded-For address that is not one. A client
// cannot name itself by sending the header through an untrusted hop, nor
// become many clients by taking the next address of its IPv6 /64.
func TestClientAddr(t *testing.T) {
	t.Parallel()
	addr := clientAddr([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	for _, c := range []struct{ peer, xff, want string }{
		{"203.0.113.7:5555", "", "203.0.113.7"},
		{"203.0.113.7:5555", "198.51.100.1", "203.0.113.7"}, // not from a trusted proxy: ignored
		{"10.0.0.2:5555", "198.51.100.1", "198.51.100.1"},
		{"10.0.0.2:5555", "6.6.6.6, 198.51.100.1, 10.0.0.9", "198.51.100.1"}, // the forged first entry is not believed
		{"10.0.0.2:5555", "", "10.0.0.2"},
		{"10.0.0.2:5555", "garbage, 10.0.0.3", "10.0.0.2"},
		{"[::ffff:203.0.113.7]:5555", "", "203.0.113.7"},
		// An IPv6 host usually has a whole /64: every address in it is one client.
		{"[2001:db8:1:2:3:4:5:6]:5555", "", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:5555", "", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:5555", "", "fe80::/64"},
		{"10.0.0.2:5555", "2001:db8:9:9::7", "2001:db8:9:9::/64"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := addr(r); got != c.want {
			t.Errorf("peer %s, X-Forwarded-For %q: client %s, want %s", c.peer, c.xff, got, c.want)
		}
	}
}

// The buckets a limiter keeps are bounded whatever the number of clients.
func TestLimiterMemoryIsBounded(t *testing.T) {
	t.Parallel()
	l := newLimiter(RateLimit{PerSecond: 1, Burst: 1})
	now := time.Now()
	for i := range maxClients + 5000 {
		l.allow("client-"+strconv.Itoa(i), now.Add(time.Duration(i)*time.Microsecond))
	}
	if n := len(l.clients); n > maxClients {
		t.Errorf("%d buckets kept, want at most %d", n, maxClients)
	}
	if ok, _ := l.allow("fresh", now.Add(time.Hour)); !ok {
		t.Error("a new client was refused")
	}
	if ok, wait := l.allow("fresh", now.Add(time.Hour)); ok || wait <= 0 {
		t.Errorf("a second request at once: ok=%v, wait %v", ok, wait)
	}
}
