package testenv_test

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/testenv"
)

func TestRefusedAddrRefuses(t *testing.T) {
	addr := testenv.RefusedAddr(t)
	for range 3 {
		_, err := net.DialTimeout("tcp", addr, time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", addr, err)
		}
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("another socket could listen on %s", addr)
	}
}
