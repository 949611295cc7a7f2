// Package smartbatch shares one round trip among the callers that need it
// at once, without a timer ("smart batching", as River's completer does
// it): the first caller runs it for itself at once; whoever calls while it
// runs waits, and when it is done the first of them runs the next one for
// all of them. A lone caller waits for nothing, and under load a batch is
// whatever arrived while the previous round trip of its kind was in
// flight, so batches grow with the load. No goroutine of its own: the
// round trip runs on a caller's.
//
// The enqueuer after a checkout's commit shares a queue task among the
// deliveries that arrive together.
package smartbatch

import (
	"context"
	"sync"
	"time"
)

// Batch shares Run among the callers of Do. Its fields are set before
// the first Do and not changed after.
type Batch[T, R any] struct {
	// Run does the work for ins and returns one result per input, in
	// their order; an error fails every caller of the batch, but when
	// Alone says the inputs may each succeed on their own.
	Run func(ctx context.Context, ins []T) ([]R, error)
	// Max bounds a batch; the calls past it wait for the next.
	Max int
	// Timeout, when positive, bounds one Run. Run's context is never a
	// caller's (see Do): the work may have been done for every caller of
	// its batch, so none may walk away from it, and one caller's
	// cancellation must not fail the others'.
	Timeout time.Duration
	// Alone reports whether Run's error for a batch of several may not
	// be every input's: each then runs on its own, so that the error
	// reaches only the caller it belongs to (a value PostgreSQL refused
	// in one row of a statement that committed nothing). nil: never.
	Alone func(err error) bool
	// Sizes observes each batch's size; may be nil.
	Sizes func(n int)

	mu      sync.Mutex
	running bool
	queue   []*call[T, R]
}

type call[T, R any] struct {
	in   T
	out  R
	err  error
	wake chan bool // true: out and err are set; false: run the next batch
}

// Do runs the work for in, alone or with whatever else is waiting, and
// returns its result. ctx gives Run its values (a trace), never its
// deadline or cancellation: see Timeout. Do waits for the batch it joins
// and for the one in flight before it, however long they take.
func (b *Batch[T, R]) Do(ctx context.Context, in T) (R, error) {
	c := &call[T, R]{in: in, wake: make(chan bool, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := !b.running
	b.running = true
	b.mu.Unlock()
	if !lead {
		if done := <-c.wake; done {
			return c.out, c.err
		}
	}
	// c leads: it is the first in the queue.
	b.runNext(ctx)
	return c.out, c.err
}

// run calls Run on a context of its own, bounded by Timeout.
func (b *Batch[T, R]) run(ctx context.Context, ins []T) ([]R, error) {
	ctx = context.WithoutCancel(ctx)
	if b.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.Timeout)
		defer cancel()
	}
	return b.Run(ctx, ins)
}

// runNext runs the work for the calls at the head of the queue, gives
// each its result, and hands the lead to the first call still waiting,
// if any.
func (b *Batch[T, R]) runNext(ctx context.Context) {
	b.mu.Lock()
	n := min(len(b.queue), max(b.Max, 1))
	calls := b.queue[:n:n]
	b.queue = b.queue[n:]
	b.mu.Unlock()

	ins := make([]T, n)
	for i, c := range calls {
		ins[i] = c.in
	}
	if b.Sizes != nil {
		b.Sizes(n)
	}
	outs, err := b.run(ctx, ins)
	if err != nil && n > 1 && b.Alone != nil && b.Alone(err) {
		for _, c := range calls {
			out, err := b.run(ctx, []T{c.in})
			if c.err = err; err == nil {
				c.out = out[0]
			}
		}
	} else {
		for i, c := range calls {
			if err != nil {
				c.err = err
			} else {
				c.out = outs[i]
			}
		}
	}
	// calls[0] is the leader: it reads its result when runNext returns.
	for _, c := range calls[1:] {
		c.wake <- true
	}
	b.mu.Lock()
	if len(b.queue) > 0 {
		b.queue[0].wake <- false
	} else {
		b.running = false
	}
	b.mu.Unlock()
}
