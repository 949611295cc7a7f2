package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/logbuf"
)

var builds struct {
	sync.Mutex
	dir   string
	paths map[string]string
}

// Binary builds a main package of this module (e.g. "./cmd/worker") with
// the given build tags, once per test binary, and returns its path.
func Binary(t testing.TB, pkg string, tags ...string) string {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	key := pkg + " " + strings.Join(tags, ",")
	if p, ok := builds.paths[key]; ok {
		return p
	}
	if builds.paths == nil {
		dir, err := os.MkdirTemp("", "sekali-bin-")
		if err != nil {
			t.Fatal(err)
		}
		builds.dir, builds.paths = dir, map[string]string{}
	}
	out := filepath.Join(builds.dir, fmt.Sprintf("%s-%d", filepath.Base(pkg), len(builds.paths)))
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = moduleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	builds.paths[key] = out
	return out
}

func moduleRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Process is a child process whose output is kept for the test.
type Process struct {
	Name string
	Cmd  *exec.Cmd
	out  *Buffer
	done chan struct{}
	err  error
}

// Start runs bin with exactly env (no inherited variables besides PATH
// and HOME) and kills it when the test ends. Its output is printed if the
// test failed.
func Start(t testing.TB, name, bin string, env map[string]string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// If the test binary dies (a timeout, a panic), so does the child.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &Process{Name: name, Cmd: cmd, out: &Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("--- output of %s:\n%s", name, p.out.String())
		}
	})
	return p
}

// Output is everything the process wrote so far.
func (p *Process) Output() string { return p.out.String() }

// Done is closed when the process has exited; Err is then its exit error.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, valid once Done is closed.
func (p *Process) Err() error { return p.err }

// Signal sends sig to the process.
func (p *Process) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s to %s: %v", sig, p.Name, err)
	}
}

// Stopped reports whether the process is stopped (SIGSTOP), from /proc.
func (p *Process) Stopped() bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Cmd.Process.Pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] == "T"
}

// WaitLog waits for a JSON log line whose msg is msg and returns the value
// of field in it.
func (p *Process) WaitLog(t testing.TB, msg, field string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if v, ok := p.out.Field(msg, field); ok {
			return v
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) before logging %q:\n%s", p.Name, p.err, msg, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %v:\n%s", p.Name, msg, timeout, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Buffer collects output, such as a logger's, from several goroutines.
type Buffer = logbuf.Buffer
