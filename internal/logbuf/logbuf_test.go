package logbuf

import (
	"fmt"
	"sync"
	"testing"
)

func TestFieldFindsTheFirstMatchingJSONLine(t *testing.T) {
	var b Buffer
	if _, ok := b.Field("api listening", "addr"); ok {
		t.Fatal("found a line in an empty buffer")
	}
	fmt.Fprintln(&b, `not json, "msg":"api listening","addr":"wrong"`)
	fmt.Fprintln(&b, `{"level":"INFO","msg":"api listening starts","addr":"wrong"}`)
	fmt.Fprintln(&b, `{"level":"INFO","msg":"api listening","addr":"127.0.0.1:8080","n":3}`)
	fmt.Fprintln(&b, `{"level":"INFO","msg":"api listening","addr":"later"}`)
	if v, ok := b.Field("api listening", "addr"); !ok || v != "127.0.0.1:8080" {
		t.Errorf("addr = %q, %v; want 127.0.0.1:8080", v, ok)
	}
	if v, ok := b.Field("api listening", "n"); !ok || v != "3" {
		t.Errorf("n = %q, %v; want 3", v, ok)
	}
}

func TestWritesFromManyGoroutinesAreKept(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(&b, "{\"msg\":\"line\",\"i\":%d}\n", i)
		}()
	}
	wg.Wait()
	if n := len(b.String()); n < 50*len(`{"msg":"line","i":0}`+"\n") {
		t.Errorf("%d bytes kept of 50 lines", n)
	}
}
