package worker

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
)

// How a task that cannot go on now tells asynq when to come back.

var (
	// errLockBusy: another worker holds the lock; try again shortly.
	errLockBusy = errors.New("lock held by another worker")
	// errLockLost: the lock could not be renewed, so the data was not sent.
	errLockLost = errors.New("lock expired before the message was handed over")
	// errDraining: the worker is shutting down; another one takes the task.
	errDraining = errors.New("worker shutting down; task handed back")
	// errProviderUnavailable: the provider refuses us; the task waits.
	errProviderUnavailable = errors.New("provider refuses us; task handed back until a probe succeeds")
	// errUnknownTemplate: this worker does not know the delivery's
	// template (an older build during a rolling deploy); one that does
	// takes the task.
	errUnknownTemplate = errors.New("template unknown to this worker; task handed back")
	// errPinnedToMissingProvider: the delivery is pinned to a provider
	// this worker does not send through.
	errPinnedToMissingProvider = errors.New("pinned to a provider this worker does not send through; task handed back")
	// errNotYet: the delivery is to be sent later; the task comes back
	// at its time.
	errNotYet = errors.New("to be sent later; task comes back at its time")
)

// waitError asks asynq to run the task again after a delay, without
// counting a failure: the delivery is waiting, not failing, and its
// back-off does not grow.
type waitError struct {
	err   error
	after time.Duration
}

func (e *waitError) Error() string { return e.err.Error() }
func (e *waitError) Unwrap() error { return e.err }

// wait wraps err in a waitError of base plus up to spread of jitter.
func wait(err error, base, spread time.Duration) error {
	return &waitError{err: err, after: base + rand.N(spread+1)}
}

// IsFailure tells asynq which errors count as failed tasks: waiting (for
// a lock, a provider, a worker that knows the template) is not failing.
func IsFailure(err error) bool {
	var we *waitError
	return !errors.As(err, &we)
}

// RetryDelay is asynq's back-off: exponential, a ceiling of 1s doubling up
// to 5 minutes, with jitter from half the ceiling to all of it; a task that
// waits comes back after its own delay.
func RetryDelay(n int, err error, _ *asynq.Task) time.Duration {
	if we := (*waitError)(nil); errors.As(err, &we) {
		return we.after
	}
	ceiling := time.Second << min(n, 9) // 1s, 2s, ... 512s
	ceiling = min(ceiling, 5*time.Minute)
	return ceiling/2 + rand.N(ceiling/2+1)
}

// providerWait is how long a task waits while the provider refuses us:
// until after the next probe, spread so that the backlog does not come
// back all at once, and never more than about half a minute.
func (w *Worker) providerWait(err error) error {
	return wait(err, w.cfg.ProbeInterval, min(5*w.cfg.ProbeInterval, 30*time.Second))
}

// unknownTemplateWait is about how long a task whose template this worker
// does not know waits before it comes back (for another worker, or this
// one after its upgrade).
const unknownTemplateWait = 5 * time.Second
