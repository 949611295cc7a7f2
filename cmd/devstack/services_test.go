package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// services runs scripts/services.sh postgres redis with env, on a PATH
// whose tools (pg_isready, redis-cli, apt-get, sudo, redis-server,
// pg_ctlcluster) are stand-ins that write their name to a log and
// answer as up says: it returns what the script printed and the tools
// it ran.
func services(t *testing.T, up bool, env ...string) (string, []string, error) {
	t.Helper()
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	status := "1"
	if up {
		status = "0"
	}
	for _, tool := range []string{"pg_isready", "redis-cli", "apt-get", "sudo", "redis-server", "pg_ctlcluster"} {
		script := "#!/bin/sh\necho " + tool + " >> " + calls + "\nexit " + status + "\n"
		if err := os.WriteFile(filepath.Join(dir, tool), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "../../scripts/services.sh", "postgres", "redis")
	cmd.Env = append([]string{"PATH=" + dir + ":/usr/bin:/bin"}, env...)
	out, err := cmd.CombinedOutput()
	b, _ := os.ReadFile(calls)
	return string(out), strings.Fields(string(b)), err
}

// scripts/services.sh (make run's first step) leaves PostgreSQL and
// Redis alone when DATABASE_URL and REDIS_URL name other places: it
// checks, installs and starts nothing, and says where they are without
// their passwords. Pointed at this machine's defaults, it checks them.
func TestServicesHonourDatabaseAndRedisURLs(t *testing.T) {
	t.Parallel()
	for _, env := range [][]string{
		{"DATABASE_URL=postgres://sekali:hunter2@db.example:5432/sekali?sslmode=require", "REDIS_URL=redis://:hunter2@cache.example:6379/0"},
		{"DATABASE_URL=postgres://sekali@127.0.0.1:5433/sekali", "REDIS_URL=redis-sentinel://s1:26379,s2:26379/0?master=main"},
		{"DATABASE_URL=host=db.example user=sekali", "REDIS_URL=rediss://localhost:6379/0"},
	} {
		out, calls, err := services(t, false, env...)
		if err != nil || len(calls) > 0 {
			t.Errorf("%v: %v, ran %v; want nothing run:\n%s", env, err, calls, out)
		}
		if !strings.Contains(out, "DATABASE_URL names") || !strings.Contains(out, "REDIS_URL names") || strings.Contains(out, "hunter2") {
			t.Errorf("%v: printed\n%s\nwant where each is, without a password", env, out)
		}
	}
	if out, _, _ := services(t, false, "DATABASE_URL=postgres://u:p@db.example:5432/x", "REDIS_URL=redis://:p@cache.example:6380/1"); !strings.Contains(out, "db.example:5432") ||
		!strings.Contains(out, "cache.example:6380") {
		t.Errorf("the script does not name the host and port:\n%s", out)
	}
	for _, env := range [][]string{nil, {"DATABASE_URL=postgres://sekali:sekali@localhost:5432/sekali?sslmode=disable", "REDIS_URL=redis://127.0.0.1:6379/0"}} {
		out, calls, err := services(t, true, env...)
		if err != nil || strings.Join(calls, " ") != "pg_isready redis-cli" {
			t.Errorf("%v: %v, ran %v; want this machine's PostgreSQL and Redis checked, and found up:\n%s", env, err, calls, out)
		}
	}
}
