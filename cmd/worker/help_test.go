package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// `worker --help` prints its usage and is not a failure, before any
// configuration is read; an unknown argument prints it and fails.
func TestHelp(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	for _, arg := range []string{"--help", "-h", "help"} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{arg}, none, &out, &errOut); err != nil || !strings.Contains(out.String(), "usage: worker") ||
			!strings.Contains(out.String(), "healthcheck") {
			t.Errorf("worker %s: %v, printed %q", arg, err, out.String())
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"serve"}, none, &out, &errOut); err == nil || !strings.Contains(errOut.String(), "usage: worker") {
		t.Errorf("worker serve: %v, printed %q; want an error and the usage", err, errOut.String())
	}
}
