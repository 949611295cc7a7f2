package worker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// batch shares one statement among the attempts that need it at once,
// as River's completer does, without a timer ("smart batching"): the
// first caller runs the statement for itself at once; whoever calls
// while it runs waits, and when it is done the first of them runs the
// next statement for all of them. A lone caller waits for nothing, and
// under load a batch is whatever arrived while the previous statement
// of its kind was in flight, so batches grow with the load. No goroutine
// of its own: the statement runs on a caller's.
type batch[T, R any] struct {
	// run runs the statement for ins and returns one result per input, in
	// their order; an error fails every caller of the batch, but for
	// PostgreSQL's refusal of one row's value, after which each caller's
	// input runs alone.
	run func(ctx context.Context, ins []T) ([]R, error)
	// max bounds a batch; the calls past it wait for the next.
	max int
	// timeout bounds one statement. It runs on a context of its own: a
	// statement may have committed for every caller of its batch, so none
	// may walk away from it, and one caller's cancellation must not fail
	// the others'.
	timeout time.Duration

	mu      sync.Mutex
	running bool
	queue   []*batchCall[T, R]
	sizes   func(n int) // observes each batch's size; may be nil
}

type batchCall[T, R any] struct {
	in   T
	out  R
	err  error
	wake chan bool // true: out and err are set; false: run the next batch
}

// do runs the statement for in, alone or with whatever else is waiting,
// and returns its result. ctx gives the statement its values (a trace),
// never its deadline: see timeout.
func (b *batch[T, R]) do(ctx context.Context, in T) (R, error) {
	c := &batchCall[T, R]{in: in, wake: make(chan bool, 1)}
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

// perRow reports whether a statement PostgreSQL failed with code may
// succeed for each of its rows alone: a value it refused (data
// exception, class 22; integrity constraint, 23), a deadlock (40P01) or
// a serialization failure (40001).
func perRow(code string) bool {
	return strings.HasPrefix(code, "22") || strings.HasPrefix(code, "23") || code == "40P01" || code == "40001"
}

// runNext runs the statement for the calls at the head of the queue,
// gives each its result, and hands the lead to the first call still
// waiting, if any.
func (b *batch[T, R]) runNext(ctx context.Context) {
	b.mu.Lock()
	n := min(len(b.queue), b.max)
	calls := b.queue[:n:n]
	b.queue = b.queue[n:]
	b.mu.Unlock()

	ins := make([]T, n)
	for i, c := range calls {
		ins[i] = c.in
	}
	if b.sizes != nil {
		b.sizes(n)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	outs, err := b.run(sctx, ins)
	cancel()
	var refused *pgconn.PgError
	if err != nil && n > 1 && errors.As(err, &refused) && perRow(refused.Code) {
		// PostgreSQL refused a value of one row, or the statement lost a
		// deadlock or a serialization conflict: it committed nothing, and
		// one row must not fail every attempt of its batch. Each runs
		// alone, so the error reaches only the attempt it belongs to. Not
		// after any other error: a lost connection may have come after
		// the commit, and a timeout or a lock wait would only be waited
		// out again, once per row.
		for _, c := range calls {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
			out, err := b.run(sctx, []T{c.in})
			cancel()
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
