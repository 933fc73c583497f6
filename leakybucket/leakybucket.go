// Package leakybucket implements the leaky bucket as a queue: requests
// leave through an outlet exactly 1/rate apart, never in a burst, and at
// most a bounded queue of callers may wait for the outlet.
//
// The bucket stores one int64, free: the point on the rate's stream
// (internal/refill's integer units, exact for fractional rates) at which
// the outlet is free again. A request of n at stream value v = V(now) is
// admitted at once if free <= v, and then the outlet is busy for n/rate:
// free becomes v + n. If the outlet is busy, TryAcquire rejects at once; a
// blocking caller queues, reserving the slot that starts at free (free
// moves to free + n) and sleeping until V reaches it. So consecutive
// admissions are at least their size / rate apart, and an idle outlet does
// not save up slots: there is no burst.
//
// # Capacity bounds the queue
//
// capacity is how much may stand ahead of a queued caller: a caller is
// queued only if at most capacity units of leak lie before its slot (it
// would wait at most capacity/rate). With single-unit requests that is at
// most capacity callers waiting; the next is rejected at once with
// admit.ErrQueueFull, not queued. go.uber.org/ratelimit's Take, the same
// schedule, has no such bound: every caller waits, however long the queue.
// A request of n is one admission that occupies the outlet for n/rate; n
// above the capacity is rejected (TryAcquireN false, AcquireN
// admit.ErrUnsatisfiable).
//
// The declared bound: in any span T at most ⌊rate × T⌋ + n admitted, n the
// largest request (⌊rate × T⌋ + 1 for single units), against a token bucket's
// capacity + rate × T.
//
// # The leaky bucket as a meter is the token bucket
//
// The other leaky bucket, the meter, lets a request in if the bucket's level
// plus its size stays within the capacity and drains the level at the rate.
// Its level is exactly capacity minus a token bucket's balance, so it admits
// exactly what a token bucket of the same capacity and rate admits: use
// mutexbucket, casbucket, shardedbucket or gcra for that. The queue is the
// different algorithm: it shapes traffic to the rate instead of policing an
// average with a burst allowance.
//
// # Concurrency
//
// One atomic word, one CompareAndSwap per decision, no lock and no
// allocation: the state is a single stream value, and time lives in V, a
// pure function of the clock reading. A stale reading computes a smaller v
// and can only find the outlet busy, never admit early. A cancelled waiter
// gives its slot back only if it is still the last one queued (free still
// holds exactly the value its reservation set); otherwise later waiters keep
// their slots and the cancelled one stays unused.
package leakybucket

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
	"github.com/admit-go/admit/internal/windowed"
)

// Bucket is a leaky bucket as a queue. It is safe for concurrent use. The
// zero value is not usable; create one with New. A Bucket must not be copied
// after first use.
//
// Fairness: queued callers are admitted in the order their reservations
// land, each one slot after the one before, and TryAcquire does not
// overtake them.
type Bucket struct {
	_    noCopy
	free atomic.Int64 // stream value at which the outlet is next free

	p   refill.Params // immutable after New; Cap is the queue bound in units
	clk refill.Clock  // immutable after New
}

var _ admit.Limiter = (*Bucket)(nil)

// noCopy makes go vet's copylocks check flag copies of a Bucket.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// New returns an idle bucket that admits one unit per 1/leakPerSecond and
// queues a caller only if at most capacity units stand ahead of it. It
// returns an error wrapping admit.ErrInvalidConfig for a capacity below 1,
// a rate that is zero, negative, NaN or infinite, or one the arithmetic
// cannot represent (above 1e9/s, or too small for the capacity).
func New(capacity int64, leakPerSecond float64, opts ...admit.Option) (*Bucket, error) {
	cfg, err := admit.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if leakPerSecond == 0 {
		return nil, fmt.Errorf("%w: leak rate 0 per second would never leak", admit.ErrInvalidConfig)
	}
	p, err := refill.NewParams(capacity, leakPerSecond)
	if err != nil {
		return nil, err
	}
	return &Bucket{p: p, clk: refill.NewClock(cfg.Clock)}, nil
}

// TryAcquire admits one request if the outlet is free now.
func (b *Bucket) TryAcquire() bool { return b.TryAcquireN(1) }

// TryAcquireN admits a request of n if the outlet is free now (no one is
// queued and the previous admission's n/rate has passed) and reports
// whether it did. TryAcquireN(0) is true; n < 0 or n > capacity is false.
func (b *Bucket) TryAcquireN(n int64) bool {
	if n == 0 {
		return true
	}
	if !b.p.ValidN(n) {
		return false
	}
	need := b.p.Units(n)
	v := b.p.V(b.clk.Now())
	for {
		free := b.free.Load()
		if free > v {
			return false // busy or queued: loads only
		}
		if b.free.CompareAndSwap(free, v+need) {
			return true
		}
	}
}

// Acquire blocks until one request is admitted; see AcquireN.
func (b *Bucket) Acquire(ctx context.Context) error { return b.AcquireN(ctx, 1) }

// AcquireN queues a request of n and blocks until its slot comes or ctx
// ends, as documented on admit.Limiter. If more than capacity units already
// stand ahead of it, it returns at once an error wrapping
// admit.ErrQueueFull.
func (b *Bucket) AcquireN(ctx context.Context, n int64) error {
	return windowed.Acquire(ctx, &b.clk, b.p.Cap>>b.p.Shift, "the capacity", n, b.reserve)
}

// Tokens returns the room left in the queue: capacity minus the units of
// leak standing ahead of a caller arriving now. It is capacity when the
// outlet is free, the only time TryAcquire admits.
func (b *Bucket) Tokens() float64 {
	backlog := max(0, b.free.Load()-b.p.V(b.clk.Now()))
	return b.p.Float(b.p.Cap - backlog)
}

// reserve is the blocking step; see windowed.Reserve.
func (b *Bucket) reserve(n, limit int64) (int64, func() bool) {
	need := b.p.Units(n)
	now := b.clk.Now()
	v := b.p.V(now)
	for {
		free := b.free.Load()
		if free <= v {
			if b.free.CompareAndSwap(free, v+need) {
				return 0, nil
			}
			continue
		}
		if free-v > b.p.Cap {
			return windowed.Full, nil
		}
		wake := b.p.When(now, free)
		if wake > refill.Horizon {
			return windowed.Never, nil
		}
		if wake-now > limit {
			return wake - now, nil
		}
		set := free + need // below V(Horizon) + Cap: no overflow
		if !b.free.CompareAndSwap(free, set) {
			continue
		}
		return wake - now, func() bool {
			// Tail rule: give the slot back only if free still holds
			// exactly what this reservation set. free only grows except
			// through such undos, so equality means every later
			// reservation was undone and nothing was admitted after it.
			if b.p.V(b.clk.Now()) >= free {
				return true // due: the slot is the caller's
			}
			b.free.CompareAndSwap(set, free)
			return false
		}
	}
}
