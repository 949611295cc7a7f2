package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// prefixer writes the stack's lines, each after the name of the process
// that wrote it, one line at a time from several goroutines.
type prefixer struct {
	mu sync.Mutex
	w  io.Writer
}

// say writes a line of devstack's own about the process name.
func (p *prefixer) say(name, format string, args ...any) {
	p.write(name, fmt.Sprintf(format, args...))
}

func (p *prefixer) write(name, line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%-10s | %s\n", name, line)
}

// copy prints what r gives, line by line, as the lines of the process
// name, telling proc of each log message first.
func (p *prefixer) copy(name string, r io.Reader, proc *proc) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line, msg := readable(sc.Text())
		proc.line(msg)
		p.write(name, line)
	}
	// A line longer than the buffer ends the scan: drain the rest, so
	// the process never blocks on a full pipe.
	_, _ = io.Copy(io.Discard, r)
}

// readable turns a JSON log line of the binaries into "15:04:05 INFO
// msg key=value ..." and returns its msg; any other line is left as it
// is.
func readable(line string) (string, string) {
	var rec map[string]any
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &rec) != nil {
		return line, ""
	}
	msg, _ := rec["msg"].(string)
	level, _ := rec["level"].(string)
	clock := ""
	if ts, ok := rec["time"].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			clock = t.Local().Format("15:04:05") + " "
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s%-5s %s", clock, level, msg)
	keys := make([]string, 0, len(rec))
	for k := range rec {
		switch k {
		case "time", "level", "msg", "service":
		default:
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := json.Marshal(rec[k])
		if err != nil {
			continue
		}
		s := string(v)
		if str, ok := rec[k].(string); ok && !strings.ContainsAny(str, " \"=") {
			s = str
		}
		fmt.Fprintf(&b, " %s=%s", k, s)
	}
	return b.String(), msg
}
