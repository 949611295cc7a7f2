// Package healthcheck lets a binary check its own /healthz, so that a
// container image without a shell or curl can still have a HEALTHCHECK:
// `api healthcheck`, `worker healthcheck`, `reconciler healthcheck`.
package healthcheck

import (
	"fmt"
	"net"
	"net/http"
	"time"
)

// Probe asks http://<addr>/healthz, where addr is the binary's listen
// address (":8080" means this host), and fails unless it answers 200.
func Probe(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	client := &http.Client{Timeout: 3 * time.Second}
	res, err := client.Get("http://" + net.JoinHostPort(host, port) + "/healthz")
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: /healthz answered %s", res.Status)
	}
	return nil
}
