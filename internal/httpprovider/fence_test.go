package httpprovider

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

// A worker that stalls after its last lease check must not start
// sending the body once the deadline has passed, even on a connection
// that is already open: the body refuses to be read.
func TestFencedBodyRefusedAfterTheDeadline(t *testing.T) {
	t.Parallel()
	b := &fencedBody{r: bytes.NewReader([]byte("the message")), deadline: time.Now().Add(time.Hour)}
	p := make([]byte, 4)
	if n, err := b.Read(p); n != 4 || err != nil || string(p) != "the " {
		t.Fatalf("before the deadline: %d, %v (%q), want 4 bytes", n, err, p[:n])
	}
	b.deadline = time.Now()
	if n, err := b.Read(p); n != 0 || !errors.Is(err, errFenced) {
		t.Errorf("at the deadline: %d bytes, %v; want none and errFenced", n, err)
	}
	past := &fencedBody{r: bytes.NewReader([]byte("the message")), deadline: time.Now().Add(-time.Second)}
	if got, err := io.ReadAll(past); len(got) != 0 || !errors.Is(err, errFenced) {
		t.Errorf("after the deadline: %q, %v; want nothing and errFenced", got, err)
	}
	// Without a deadline there is no telling: nothing is sent.
	if n, err := (&fencedBody{r: bytes.NewReader([]byte("x"))}).Read(p); n != 0 || !errors.Is(err, errFenced) {
		t.Errorf("no deadline: %d bytes, %v; want none and errFenced", n, err)
	}
}
