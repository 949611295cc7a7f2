package testenv

import (
	"os"
	"strings"
	"testing"
)

// ShellBlocks returns the ```sh blocks of the Markdown file at path that
// are under the heading (its text, without the #s), up to the next
// heading of its level or above, in their order: a test runs a doc's
// commands as they are written with them. It fails the test when the
// heading is not there or has no block.
func ShellBlocks(t testing.TB, path, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	level := 0 // the heading's, once found
	var block *strings.Builder
	fence := "" // the open fence's info string, "" outside one
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case fence == "" && strings.HasPrefix(line, "```"):
			fence = strings.TrimPrefix(line, "```") + " " // "sh " for ```sh
			if level > 0 && fence == "sh " {
				block = &strings.Builder{}
			}
		case fence != "" && line == "```":
			if block != nil {
				out = append(out, block.String())
				block = nil
			}
			fence = ""
		case fence != "":
			if block != nil {
				block.WriteString(line + "\n")
			}
		case strings.HasPrefix(line, "#"):
			hashes := len(line) - len(strings.TrimLeft(line, "#"))
			switch {
			case level == 0 && strings.TrimSpace(line[hashes:]) == heading:
				level = hashes
			case level > 0 && hashes <= level:
				return blocksOf(t, path, heading, out)
			}
		}
	}
	if level == 0 {
		t.Fatalf("%s has no heading %q", path, heading)
	}
	return blocksOf(t, path, heading, out)
}

func blocksOf(t testing.TB, path, heading string, blocks []string) []string {
	t.Helper()
	if len(blocks) == 0 {
		t.Fatalf("%s has no sh block under %q", path, heading)
	}
	return blocks
}
