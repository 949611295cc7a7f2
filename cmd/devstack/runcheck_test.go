//go:build runcheck

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/logbuf"
)

// `make run` as a newcomer meets it (make run-check, a step of make ci):
// the stack comes up from this checkout, the README's own commands make
// a key and place an order, its confirmation arrives in Mailpit once, and
// a Ctrl-C stops everything, the API first, leaving no port taken.
func TestMakeRun(t *testing.T) {
	root := "../.."
	if err := portsFree(apiAddr, mailpitUI, mailpitSMTP, workerMetrics, reconcMetrics, apiMetrics); err != nil {
		t.Fatalf("make run needs its ports: %v", err)
	}
	var out logbuf.Buffer
	mk := exec.Command("make", "--no-print-directory", "run")
	mk.Dir = root
	mk.Stdout, mk.Stderr = &out, &out
	// A group of its own, as a terminal's foreground job: Ctrl-C is a
	// SIGINT to the whole group.
	mk.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := mk.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- mk.Wait() }()
	defer func() {
		if mk.ProcessState == nil {
			_ = syscall.Kill(-mk.Process.Pid, syscall.SIGKILL)
		}
		t.Logf("make run printed:\n%s", out.String())
	}()

	waitFor(t, exited, 5*time.Minute, "make run to say it is running", func() bool {
		return strings.Contains(out.String(), "sekali is running")
	})

	snippet := readmeSnippet(t, root+"/README.md")
	sh := exec.Command("bash", "-euo", "pipefail", "-c", snippet)
	sh.Dir = root
	body, err := sh.Output()
	if err != nil {
		t.Fatalf("the README's commands failed: %v\n%s", err, errOutput(err))
	}
	var order struct {
		ID            string `json:"id"`
		CustomerEmail string `json:"customer_email"`
		Notifications []struct {
			Template string `json:"template"`
		} `json:"notifications"`
	}
	if err := json.Unmarshal(body, &order); err != nil || order.ID == "" || len(order.Notifications) != 1 {
		t.Fatalf("the README's curl answered %s (%v), want an order with one notification", body, err)
	}

	var count int
	waitFor(t, exited, 30*time.Second, "the confirmation in Mailpit", func() bool {
		count = mailpitCount(t, order.CustomerEmail)
		return count > 0
	})
	time.Sleep(2 * time.Second) // a second e-mail would have arrived by now
	if n := mailpitCount(t, order.CustomerEmail); n != 1 {
		t.Fatalf("%d e-mails to %s in Mailpit, want 1", n, order.CustomerEmail)
	}

	if err := syscall.Kill(-mk.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatal("make run did not stop within 2 minutes of a Ctrl-C")
	}
	log := out.String()
	if !strings.Contains(log, "devstack   | stopped cleanly") {
		t.Error("no clean stop after the Ctrl-C")
	}
	// The API stops first, Mailpit last.
	stoppedInOrder(t, log, "api", "worker", "reconciler", "mailpit")
	if err := portsFree(apiAddr, mailpitUI, mailpitSMTP, workerMetrics, reconcMetrics, apiMetrics); err != nil {
		t.Errorf("after the stop: %v", err)
	}
}

// readmeSnippet is the README's first sh block that makes a key with
// bin/api and places an order with curl: the commands a newcomer copies.
func readmeSnippet(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], "bin/api keys create") && strings.Contains(m[1], "curl") {
			return m[1]
		}
	}
	t.Fatal("README.md has no sh block that makes a key with bin/api and places an order with curl")
	return ""
}

// mailpitCount is how many e-mails to addr Mailpit holds.
func mailpitCount(t *testing.T, addr string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+mailpitUI+"/api/v1/search?query="+"to:"+addr, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("Mailpit's API: %v", err)
	}
	defer resp.Body.Close()
	var res struct {
		MessagesCount *int `json:"messages_count"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || res.MessagesCount == nil {
		t.Fatalf("Mailpit's search answered %s: %v", resp.Status, err)
	}
	return *res.MessagesCount
}

// waitFor polls cond until it holds, failing the test if make exits or
// timeout passes first.
func waitFor(t *testing.T, exited <-chan error, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case err := <-exited:
			t.Fatalf("make run exited (%v) while waiting for %s", err, what)
		case <-deadline:
			t.Fatalf("no %s within %s", what, timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func errOutput(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
