// Package httpprovidertest is what the fakes of the providers' APIs
// (resendtest, postmarktest, mailguntest) and the HTTP providers' tests
// share: a server on a loopback port, JSON answers, a connection hung up
// without an answer, faults queued per kind of request, and the checks
// every HTTP provider must pass around the hand-over.
//
// Like the fakes, it does not depend on package testing, so that test
// binaries (internal/chaos) can run them; its checks take a T.
package httpprovidertest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Listen listens on a loopback port for the fake API name (its package,
// in the panic); it panics if it cannot, as httptest.NewServer does.
// url, http://127.0.0.1:<port>, is the base URL to give the provider.
func Listen(name string) (ln net.Listener, url string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("%s: listen: %v", name, err))
	}
	return ln, "http://" + ln.Addr().String()
}

// Serve serves h on ln, in a goroutine that ends when the returned
// server is closed.
func Serve(ln net.Listener, h http.Handler) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv
}

// HangUp closes the connection without an answer.
func HangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("httpprovidertest: connection cannot be hijacked")
	}
	if conn, _, err := hj.Hijack(); err == nil {
		_ = conn.Close()
	}
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	_ = json.NewEncoder(&buf).Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// RandomHex returns n random bytes in hex: keys, tokens and ids.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
