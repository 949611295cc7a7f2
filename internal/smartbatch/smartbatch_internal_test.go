package smartbatch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/testenv"
)

// A lone call runs at once, on its own; calls that arrive while a
// statement runs share the next one; every call gets its own result,
// and an error reaches every call of its batch and no other.
func TestBatchSharesAStatementAmongWhoeverWaits(t *testing.T) {
	t.Parallel()
	var statements atomic.Int32
	release := make(chan struct{})
	var sizes []int
	var mu sync.Mutex
	b := &Batch[int, int]{Max: 64, Timeout: time.Minute,
		Sizes: func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() },
		Run: func(ctx context.Context, ins []int) ([]int, error) {
			if statements.Add(1) == 1 {
				<-release // the first statement is slow: the others queue behind it
			}
			out := make([]int, len(ins))
			for i, in := range ins {
				if in < 0 {
					return nil, errors.New("the statement failed")
				}
				out[i] = in * 10
			}
			return out, nil
		}}
	ctx := context.Background()
	first := make(chan int)
	go func() { v, _ := b.Do(ctx, 1); first <- v }()
	testenv.WaitFor(t, "the first statement to be running", 10*time.Second, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.running && len(b.queue) == 0 })

	var wg sync.WaitGroup
	got := make([]int, 20)
	for i := range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], _ = b.Do(ctx, i+2) }()
	}
	testenv.WaitFor(t, "twenty calls to queue", 10*time.Second, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 20 })
	close(release)
	wg.Wait()
	if v := <-first; v != 10 {
		t.Errorf("the first call got %d, want 10", v)
	}
	for i, v := range got {
		if v != (i+2)*10 {
			t.Errorf("call %d got %d, want %d", i, v, (i+2)*10)
		}
	}
	if n := statements.Load(); n != 2 || len(sizes) != 2 || sizes[0] != 1 || sizes[1] != 20 {
		t.Errorf("%d statements of sizes %v, want 2: the lone first, then the 20 that waited for it", n, sizes)
	}

	// A failing statement fails its batch's calls only.
	if _, err := b.Do(ctx, -1); err == nil {
		t.Error("the failed statement's call got no error")
	}
	if v, err := b.Do(ctx, 3); err != nil || v != 30 {
		t.Errorf("the next call: %d, %v", v, err)
	}
}

// Past max, the calls wait for the next statement, which runs them.
func TestBatchIsBoundedAndEveryCallIsServed(t *testing.T) {
	t.Parallel()
	var biggest atomic.Int32
	b := &Batch[int, int]{Max: 4, Timeout: time.Minute, Run: func(ctx context.Context, ins []int) ([]int, error) {
		if n := int32(len(ins)); n > biggest.Load() {
			biggest.Store(n)
		}
		time.Sleep(time.Millisecond)
		return ins, nil
	}}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := b.Do(context.Background(), i); err != nil || v != i {
				t.Errorf("call %d got %d, %v", i, v, err)
			}
		}()
	}
	wg.Wait()
	if n := biggest.Load(); n > 4 {
		t.Errorf("a batch of %d, past max 4", n)
	}
	if b.running || len(b.queue) != 0 {
		t.Errorf("after every call returned: running %v, %d queued", b.running, len(b.queue))
	}
}

// An error Alone accepts fails only the call that brought the input
// it is about: each input of the batch runs again on its own. Any other
// error fails the whole batch, with no second run; and so does every
// error without Alone.
func TestBatchRunsEachAloneWhenAloneSaysSo(t *testing.T) {
	t.Parallel()
	errRefused := errors.New("one input refused")
	errLost := errors.New("connection lost")
	alone := func(err error) bool { return errors.Is(err, errRefused) }
	for _, tc := range []struct {
		name       string
		err        error
		alone      func(error) bool
		statements int32 // the shared one, then one per call if they ran alone
		goodPassed bool
	}{
		{"refused", errRefused, alone, 1 + 3, true},
		{"connection lost", errLost, alone, 1, false},
		{"refused without Alone", errRefused, nil, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var statements atomic.Int32
			release := make(chan struct{})
			b := &Batch[int, int]{Max: 64, Timeout: time.Minute, Alone: tc.alone,
				Run: func(ctx context.Context, ins []int) ([]int, error) {
					if statements.Add(1) == 1 {
						<-release
						return []int{0}, nil // the lone first call, while the three queue
					}
					out := make([]int, len(ins))
					for i, in := range ins {
						if in < 0 {
							return nil, tc.err
						}
						out[i] = in * 10
					}
					return out, nil
				}}
			ctx := context.Background()
			go func() { _, _ = b.Do(ctx, 0) }()
			testenv.WaitFor(t, "the first statement to be running", 10*time.Second, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.running })
			ins := []int{1, -1, 2}
			outs, errs := make([]int, 3), make([]error, 3)
			var wg sync.WaitGroup
			for i, in := range ins {
				wg.Go(func() { outs[i], errs[i] = b.Do(ctx, in) })
			}
			testenv.WaitFor(t, "three calls to queue", 10*time.Second, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 3 })
			close(release)
			wg.Wait()
			if !errors.Is(errs[1], tc.err) {
				t.Errorf("the bad input's call: %v, want %v", errs[1], tc.err)
			}
			for _, i := range []int{0, 2} {
				if passed := errs[i] == nil && outs[i] == ins[i]*10; passed != tc.goodPassed {
					t.Errorf("call %d: %d, %v; want passed=%v", i, outs[i], errs[i], tc.goodPassed)
				}
			}
			if n := statements.Load() - 1; n != tc.statements {
				t.Errorf("%d statements after the first, want %d", n, tc.statements)
			}
		})
	}
}

// Run's context carries the caller's values but not its cancellation:
// a leader whose context is cancelled still has its batch run, for
// itself and for those that joined it.
func TestBatchRunsOnAContextOfItsOwn(t *testing.T) {
	t.Parallel()
	type key struct{}
	var got []any
	var errs []error
	b := &Batch[int, int]{Max: 8, Run: func(ctx context.Context, ins []int) ([]int, error) {
		got = append(got, ctx.Value(key{}))
		errs = append(errs, ctx.Err())
		return ins, nil
	}}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "trace"))
	cancel()
	if v, err := b.Do(ctx, 7); v != 7 || err != nil {
		t.Fatalf("Do on a cancelled context: %d, %v", v, err)
	}
	if len(got) != 1 || got[0] != "trace" || errs[0] != nil {
		t.Errorf("Run saw values %v and errors %v, want the caller's value and no cancellation", got, errs)
	}
}
