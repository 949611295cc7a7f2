package logbuf_test

import (
	"slices"
	"testing"

	"github.com/sekali-dev/sekali/internal/logbuf"
)

func TestDuplicateKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want []string
	}{
		{`{"a":1,"b":{"a":2},"c":[{"a":3}]}`, nil},
		{`{"msg":"x","result":"sent","result":"retried"}`, []string{"result"}},
		{`{"a":{"b":1,"b":2},"c":[{"d":1,"d":[]}]}`, []string{"a.b", "c.0.d"}},
	} {
		got, err := logbuf.DuplicateKeys([]byte(c.in))
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("DuplicateKeys(%s) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{`{"a":1}{"b":2}`, `{"a":`, ``} {
		if _, err := logbuf.DuplicateKeys([]byte(in)); err == nil {
			t.Errorf("DuplicateKeys(%q): no error", in)
		}
	}
}
