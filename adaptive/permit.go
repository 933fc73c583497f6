package adaptive

import "sync/atomic"

// Permit is one call's admission, ended exactly once with Success, Dropped
// or Ignore; the first of these releases it and further calls are no-ops.
// Its methods are safe for concurrent use. The nil *Permit and the zero
// Permit hold nothing: their methods do nothing. A Permit must not be
// copied.
type Permit struct {
	l     *Limiter
	start int64 // when it was handed out, on the limiter's clock
	ended atomic.Bool
	// waited is set when the permit was handed out of the backlog.
	waited bool
}

// Success ends the call as done: its latency, from the permit being handed
// out to now, is a sample of how the backend is doing.
func (p *Permit) Success() { p.finish(success) }

// Dropped ends the call as a loss: it timed out, its caller gave up while
// it was in flight (a client timeout is how overload usually shows), or the
// backend said it is overloaded or failed (an HTTP 429 or 5xx from it, a
// gRPC ResourceExhausted, Unavailable or Internal). Drops beyond 5% of an
// update window's outcomes, and more than one, lower the limit, whatever
// the latency says; fewer are taken for callers that went away on their
// own.
func (p *Permit) Dropped() { p.finish(dropped) }

// Ignore ends the call without a sample: it ended for a reason that says
// nothing about load and whose duration is no latency (a request refused by
// validation before any work, a call the service itself abandoned). It only
// releases the permit.
func (p *Permit) Ignore() { p.finish(ignored) }

func (p *Permit) finish(o outcome) {
	if p == nil || p.l == nil || !p.ended.CompareAndSwap(false, true) {
		return
	}
	p.l.end(p, o)
}
