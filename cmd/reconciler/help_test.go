package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// `reconciler --help` prints its usage and flags and is not a failure,
// before any configuration is read; an unknown argument prints it and
// fails.
func TestHelp(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	for _, arg := range []string{"--help", "-h", "help"} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{arg}, none, &out, &errOut); err != nil || !strings.Contains(out.String(), "usage: reconciler") ||
			!strings.Contains(out.String(), "-once") {
			t.Errorf("reconciler %s: %v, printed %q", arg, err, out.String())
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"serve"}, none, &out, &errOut); err == nil || !strings.Contains(errOut.String(), "usage: reconciler") {
		t.Errorf("reconciler serve: %v, printed %q; want an error and the usage", err, errOut.String())
	}
}
