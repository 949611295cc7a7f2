package httpprovidertest

import "sync"

// Faults queues the faults a fake injects, of its own type F, by kind of
// request (a path, or a name such as "messages"), and counts the
// requests of each kind. The zero value is ready; its methods are safe
// for concurrent use.
type Faults[F any] struct {
	mu       sync.Mutex
	queued   map[string][]F
	requests map[string]int
}

// Add queues faults for the next requests of a kind, in order.
func (q *Faults[F]) Add(kind string, faults ...F) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queued == nil {
		q.queued = map[string][]F{}
	}
	q.queued[kind] = append(q.queued[kind], faults...)
}

// Begin counts a request of a kind and takes its fault: nil if none is
// queued.
func (q *Faults[F]) Begin(kind string) *F {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.requests == nil {
		q.requests = map[string]int{}
	}
	q.requests[kind]++
	if len(q.queued[kind]) == 0 {
		return nil
	}
	f := q.queued[kind][0]
	q.queued[kind] = q.queued[kind][1:]
	return &f
}

// Requests counts the requests of a kind begun so far, answered or not.
func (q *Faults[F]) Requests(kind string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.requests[kind]
}
