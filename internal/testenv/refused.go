package testenv

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusedAddr is a 127.0.0.1 address that refuses every connection for
// the rest of the test: a TCP socket bound to it that never listens.
// A server closed by the test does not do that reliably: its port is
// free again, and another test's listener (even FreePort's brief one)
// may take it and accept, then reset, the connection. The socket is
// bound without SO_REUSEADDR, so no other socket can take the port.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
