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
	return a.IsGlobalUnicast() && !a.IsPrivate() && !isShared(a)
}

// isShared is the carrier-grade NAT range (RFC 6598), private in all but
// name.
func isShared(a netip.Addr) bool {
	return netip.MustParsePrefix("100.64.0.0/10").Contains(a)
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
