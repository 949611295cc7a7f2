//go:build runcheck

package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/logbuf"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// `make run` as a newcomer meets it (make run-check, a step of make ci):
// the stack comes up from this checkout, saying what it builds and why
// that may take minutes, the README's own commands make a key and place
// an order, its confirmation arrives in Mailpit once, docs/testmode.md's
// recipe for a shop's CI runs as written with make run's values (its
// receiver here), and a Ctrl-C stops everything, the API first, leaving
// no port taken.
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

	waitFor(t, exited, 8*time.Minute, "make run to say it is running", func() bool {
		return strings.Contains(out.String(), "sekali is running")
	})
	if log := out.String(); !strings.Contains(log, "== building the API, the worker, the reconciler and devstack into bin/: the first time") ||
		!strings.Contains(log, "== done in ") {
		t.Errorf("make run did not say what it builds, why it may take minutes, and when it is done")
	}

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
	// In Indonesian, as the README says after its commands.
	if html := mailpitHTML(t, order.CustomerEmail); !strings.Contains(html, `<html lang="id"`) {
		t.Errorf("the README's e-mail is not in Indonesian, as the README says:\n%.300s", html)
	}

	testModeRecipe(t, root)

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

// testModeRecipe runs docs/testmode.md's recipe for a shop's CI, after
// the page's definitions, as it is written, against make run (its API,
// its admin token, bin/api), with HOOKS a receiver of this test's: the
// receiver gets the signed bounce of the recipe's order.
func testModeRecipe(t *testing.T, root string) {
	t.Helper()
	bounces := make(chan []byte, 10)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"notification.bounced"`) {
			bounces <- body
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	doc := root + "/docs/testmode.md"
	script := testenv.ShellBlocks(t, doc, "Test keys")[0] + strings.Join(testenv.ShellBlocks(t, doc, "A recipe for the shop's CI"), "") +
		`printf '\nthe order: %s\n' "$ORDER"` + "\n"
	sh := exec.Command("bash", "-euo", "pipefail", "-c", script)
	sh.Dir = root
	// make run's values, as the page's definitions default to: none of
	// this shell's own.
	sh.Env = slices.DeleteFunc(os.Environ(), func(v string) bool {
		return strings.HasPrefix(v, "API=") || strings.HasPrefix(v, "ADMIN_TOKEN=")
	})
	sh.Env = append(sh.Env, "HOOKS="+rcv.URL+"/hooks/sekali")
	out, err := sh.Output()
	if err != nil {
		t.Fatalf("docs/testmode.md's recipe failed: %v\n%s\n%s", err, out, errOutput(err))
	}
	order := regexp.MustCompile(`the order: ([0-9a-f-]{36})\n`).FindSubmatch(out)
	if order == nil {
		t.Fatalf("docs/testmode.md's recipe printed\n%s\nwithout its order", out)
	}
	select {
	case body := <-bounces:
		var ev struct {
			Data struct {
				OrderID string `json:"order_id"`
				Test    bool   `json:"test"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &ev); err != nil || ev.Data.OrderID != string(order[1]) || !ev.Data.Test {
			t.Errorf("the recipe's receiver got %s (%v), want the bounce of order %s, marked test", body, err, order[1])
		}
	case <-time.After(30 * time.Second):
		t.Error("the recipe's receiver got no notification.bounced within 30 s")
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

// mailpitHTML is the HTML of the newest e-mail to addr in Mailpit.
func mailpitHTML(t *testing.T, addr string) string {
	t.Helper()
	get := func(path string, into any) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+mailpitUI+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("Mailpit's API: %v", err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatalf("Mailpit's %s answered %s: %v", path, resp.Status, err)
		}
	}
	var found struct {
		Messages []struct{ ID string } `json:"messages"`
	}
	get("/api/v1/search?query=to:"+addr, &found)
	if len(found.Messages) == 0 {
		t.Fatalf("no e-mail to %s in Mailpit", addr)
	}
	var msg struct{ HTML string }
	get("/api/v1/message/"+found.Messages[0].ID, &msg)
	return msg.HTML
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
