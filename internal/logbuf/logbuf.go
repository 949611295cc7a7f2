// Package logbuf keeps what a child process (or a logger) writes, from
// several goroutines, and finds lines in the JSON logs the binaries
// write. The tests (through testenv) and the benchmark both use it to
// learn what a process they started reported, such as the address it
// listens on.
package logbuf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// Buffer collects output from several goroutines.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Field finds the first JSON log line whose msg is msg and returns the
// value of field in it; ok is false until such a line has been written.
func (l *Buffer) Field(msg, field string) (value string, ok bool) {
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
			return fmt.Sprint(line[field]), true
		}
	}
	return "", false
}
