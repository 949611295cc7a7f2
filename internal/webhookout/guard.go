package webhookout

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"syscall"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
)

// Guard keeps the endpoints off the service's own network (server-side
// request forgery): a URL must be https (http only with AllowHTTP), and
// its host must resolve only to public addresses, unless Allowed names
// them. The check is made when an endpoint is registered and again on
// every connection, since a name can resolve elsewhere later.
type Guard struct {
	AllowHTTP bool           // WEBHOOK_ALLOW_HTTP: plain http URLs too (development)
	Allowed   []netip.Prefix // WEBHOOK_ALLOW_NETWORKS: private ranges that may be reached
	Resolver  *net.Resolver  // nil: net.DefaultResolver
}

// ErrForbiddenAddress: the endpoint's host is, or resolves to, an address
// this service does not post to.
var ErrForbiddenAddress = errors.New("an address this service does not post to (private, loopback, link-local or unspecified; WEBHOOK_ALLOW_NETWORKS names exceptions)")

// CheckURL refuses a URL that is not absolute https (or http with
// AllowHTTP), carries credentials or a fragment, or whose host resolves
// to an address the guard forbids.
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return err
	case u.Scheme != "https" && !(u.Scheme == "http" && g.AllowHTTP):
		return fmt.Errorf("%q must be an https URL (WEBHOOK_ALLOW_HTTP allows http)", raw)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%q has no host", raw)
	case u.User != nil:
		return fmt.Errorf("%q carries credentials; the signature is the credential", raw)
	case u.Fragment != "" || u.RawFragment != "":
		return fmt.Errorf("%q has a fragment", raw)
	case len(raw) > 2000:
		return errors.New("the URL is longer than 2000 characters")
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := g.resolver().LookupNetIP(rctx, "ip", u.Hostname())
	if err != nil {
		return fmt.Errorf("host %s does not resolve: %w", u.Hostname(), err)
	}
	for _, a := range addrs {
		if !g.allowed(a) {
			return fmt.Errorf("host %s is %s: %w", u.Hostname(), a, ErrForbiddenAddress)
		}
	}
	return nil
}

// control is the dialer's check of the address it is about to connect to,
// after resolution: the second line of defence.
func (g *Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", address, err)
	}
	if !g.allowed(ap.Addr()) {
		return fmt.Errorf("connect to %s: %w", address, ErrForbiddenAddress)
	}
	return nil
}

// allowed reports whether a may be posted to.
func (g *Guard) allowed(a netip.Addr) bool {
	a = a.Unmap()
	if slices.ContainsFunc(g.Allowed, func(p netip.Prefix) bool { return p.Contains(a) }) {
		return true
	}
	if v4, ok := embeddedIPv4(a); ok {
		// The IPv6 form of an IPv4 address, through NAT64 or 6to4: it
		// reaches that address, which must be allowed itself.
		return g.allowed(v4)
	}
	return a.IsGlobalUnicast() && !a.IsPrivate() && !slices.ContainsFunc(notPublic, func(p netip.Prefix) bool { return p.Contains(a) })
}

// notPublic are the ranges IsGlobalUnicast and IsPrivate leave out that
// are nobody's public endpoint (IANA's special-purpose registries): a
// shop's webhook resolving into one is a mistake or an attack.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT (RFC 6598), private in all but name
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated)
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64 (RFC 8215)
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments, Teredo (2001::/32) among them
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
}

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052: the IPv4 address in the last 32 bits
	sixTo4 = netip.MustParsePrefix("2002::/16")    // RFC 3056: the IPv4 address in bits 16 to 48
)

// embeddedIPv4 is the IPv4 address a NAT64 or 6to4 address reaches.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case !a.Is6():
		return netip.Addr{}, false
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixTo4.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

func (g *Guard) resolver() *net.Resolver {
	if g.Resolver != nil {
		return g.Resolver
	}
	return net.DefaultResolver
}

// ReadGuard reads WEBHOOK_ALLOW_HTTP (true or false, default false) and
// WEBHOOK_ALLOW_NETWORKS (comma-separated CIDRs, default none), which the
// API (at registration) and the reconciler (at connect time) share.
func ReadGuard(env *envconfig.Reader) *Guard {
	return &Guard{
		AllowHTTP: env.OneOf("WEBHOOK_ALLOW_HTTP", "false", "false", "true") == "true",
		Allowed:   env.Prefixes("WEBHOOK_ALLOW_NETWORKS", "10.20.0.0/16"),
	}
}
