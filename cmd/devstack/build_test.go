package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildScript runs scripts/build.sh (make run's build) with a stand-in
// for go build -v: a shell script that writes what go would (a package
// a line, on standard error) and exits with status.
func buildScript(t *testing.T, goOutput string, status string) (string, error) {
	t.Helper()
	fake := filepath.Join(t.TempDir(), "go")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"+goOutput+"\nexit "+status+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "../../scripts/build.sh", "building: the first time takes minutes", fake, "build", "-v")
	cmd.Env = append(os.Environ(), "BUILD_QUIET_SECONDS=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// make run's build says first why it may take minutes, then counts the
// packages go compiles, says so when nothing comes for a while, passes
// go's errors through and fails with it; a build from the cache says
// only why and that it is done.
func TestTheBuildShowsProgress(t *testing.T) {
	t.Parallel()
	out, err := buildScript(t, `for i in $(seq 1 120); do echo "example.com/pkg$i" >&2; done
sleep 1.5
echo "# example.com/broken" >&2
echo "broken/x.go:3:1: syntax error: unexpected }" >&2`, "2")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("a failed build: %v, want go's exit status 2", err)
	}
	for _, want := range []string{
		"== building: the first time takes minutes\n",
		"   50 packages compiled (", "   100 packages compiled (",
		"   still building (",
		"# example.com/broken\nbroken/x.go:3:1: syntax error: unexpected }\n",
		"   120 packages compiled\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the build printed\n%s\nwithout %q", out, want)
		}
	}
	if strings.Contains(out, "example.com/pkg7\n") || strings.Contains(out, "== done") {
		t.Errorf("the build printed a package's name, or done after a failure:\n%s", out)
	}

	out, err = buildScript(t, "true", "0")
	if err != nil || out != "== building: the first time takes minutes\n== done in 0 s\n" {
		t.Errorf("a build from the cache: %v, printed %q", err, out)
	}
}
