package redisbucket

import (
	"context"
	"sync/atomic"
	"time"
)

// deadlines bounds the requests a Limiter makes on its callers' goroutines
// without a timer per request.
//
// go-redis and rueidis bound a request through its context: the socket
// deadlines come from ctx.Deadline(), and a wait for a pooled connection or
// a dial ends when ctx.Done() closes. context.WithTimeout for every decision
// costs a timer, a channel and five allocations, several times what the
// shared slots below cost (BenchmarkRequestContext; docs/redis.md has the
// run), and most of what this package's client spent per decision beyond
// go-redis/redis_rate's (whose callers pass their own context). Instead, each request's context (callCtx) carries its exact
// deadline, now + timeout, for the sockets, and shares Done with the
// requests that start within the same sixteenth of a timeout: one channel,
// closed by one timer at the earliest of their deadlines. A pool wait or a
// dial thus ends at most timeout/16 before the request's own deadline,
// never after it; the I/O has the exact deadline.
//
// A request's context does not end when its caller's is cancelled: the
// request runs to its reply or its deadline (go-redis does not interrupt a
// command on the wire for a cancellation either), and the caller, whose
// context has ended, then gets ctx.Err() if the request failed, or the
// decision if it was made. A caller whose context has an earlier deadline
// than the timeout stops waiting at it (see Limiter.remote).
type deadlines struct {
	timeout time.Duration
	slot    atomic.Pointer[slot]
}

// slot is the shared end of the requests started in one sixteenth of a
// timeout: done is closed at monotonic time at (ns since mono), the
// earliest of their deadlines.
type slot struct {
	at   int64
	done chan struct{}
}

// get returns the slot for a request that starts at monotonic time now
// (ns since mono): one whose end lies within the last sixteenth of a timeout
// before the request's deadline, a new one if the current one ends earlier.
func (ds *deadlines) get(now int64) *slot {
	end, slack := now+int64(ds.timeout), int64(ds.timeout/16)
	s := ds.slot.Load()
	if s != nil && s.at <= end && s.at >= end-slack {
		return s
	}
	n := &slot{at: end, done: make(chan struct{})}
	if s == nil || s.at < end-slack {
		// The current slot ends too early for this request: replace it,
		// unless another request just did.
		if !ds.slot.CompareAndSwap(s, n) {
			if s := ds.slot.Load(); s != nil && s.at <= end && s.at >= end-slack {
				return s
			}
		}
	}
	// n is installed, or serves this request alone (a slot ending after
	// this request's deadline, from a request whose clock read came later).
	time.AfterFunc(time.Duration(end-int64(time.Since(mono))), func() { close(n.done) })
	return n
}

// callCtx is a request's context: its caller's values, the exact deadline,
// and the slot's Done.
type callCtx struct {
	context.Context // the caller's, for its values
	deadline        time.Time
	s               *slot
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *callCtx) Done() <-chan struct{} { return c.s.done }

// Err is nil until Done is closed, as the context contract says, and then
// DeadlineExceeded: the caller's cancellation does not end the request.
func (c *callCtx) Err() error {
	select {
	case <-c.s.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
