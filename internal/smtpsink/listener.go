package smtpsink

import (
	"bufio"
	"net"
	"sync"
)

// listener counts and tracks the connections it accepts, so that Close can
// close each of them, including one go-smtp has accepted but not yet
// registered (go-smtp's own Close misses those).
type listener struct {
	net.Listener
	srv *Server

	closeOnce sync.Once
	closeErr  error
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &conn{Conn: c, srv: l.srv, in: bufio.NewReader(c)}

	s := l.srv
	s.mu.Lock()
	s.accepted++
	closed := s.closed
	if !closed {
		s.conns[tc] = struct{}{}
	}
	s.mu.Unlock()

	if closed {
		// Accepted while Close runs: go-smtp gets a closed connection and
		// ends its goroutine at the first read.
		c.Close()
	}
	return tc, nil
}

// Close closes the listener once; go-smtp's Shutdown closes it again.
func (l *listener) Close() error {
	l.closeOnce.Do(func() { l.closeErr = l.Listener.Close() })
	return l.closeErr
}
