// Package leakybucket implements the leaky bucket as a queue: requests
// leave through an outlet 1/rate apart (to the clock's rounding, below),
// never in a burst, and at most a bounded queue of callers may wait for the
// outlet.
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
// admit.ErrQueueFull, not queued. A queued caller whose context ends leaves
// the queue: the callers behind it move up by its size (they wake earlier),
// so the outlet never idles while a caller waits, and ErrQueueFull counts
// only the callers really waiting. go.uber.org/ratelimit's Take, the same
// schedule, has no such bound: every caller waits, however long the queue.
// A request of n is one admission that occupies the outlet for n/rate; n
// above the capacity is rejected (TryAcquireN false, AcquireN
// admit.ErrUnsatisfiable).
//
// The declared bound: in any span T at most ⌊rate × T'⌋ + n admitted, T'
// the span plus one unit of the rate's stream for rounding (a reading is
// rounded down to the stream's units, so a slot may open up to one unit
// before the exact 1/rate: at 1/3 per second, admissions at 4 ns and
// 3,000,000,003 ns. A unit lasts under 2 ns, so a slot is at most 1 ns
// early in whole nanoseconds where 1/rate is one, unless the capacity is
// so large for the rate that finer units would not fit (internal/refill):
// at capacity 1e9 and 1e-6 per second a unit is about 466 µs, and
// admissions at 465,000 ns and 10^15 − 20 ns), n the largest request
// (⌊rate × T'⌋ + 1 for single units), against a token bucket's
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
// TryAcquire is one atomic word, one CompareAndSwap per decision, no lock
// and no allocation: the state is a single stream value, and time lives in
// V, a pure function of the clock reading. A stale reading computes a
// smaller v and can only find the outlet busy, never admit early.
//
// The queue itself, the slots of the callers still waiting, is guarded by a
// mutex that only the blocking path takes: AcquireN when it must queue, a
// waiter checking its slot before it sleeps, and a waiter leaving. Under the
// mutex, the waiting slots are contiguous and end at free; TryAcquire moves
// free only once free <= V(now), when every waiting slot has come due, and
// so a leaving waiter's CompareAndSwap of free fails exactly when the whole
// queue came due behind the mutex's back. A waiter that leaves takes its
// units out: free moves back by them and every slot behind it moves up, its
// sleeper woken to sleep until the earlier instant.
package leakybucket

import (
	"context"
	"fmt"
	"slices"
	"sync"
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

	// mu guards q; TryAcquire never takes it.
	mu sync.Mutex
	// q holds the slots of the callers still waiting, in slot order. The
	// slots are contiguous, each starting where the one before ends, and
	// free is the end of the last, unless a TryAcquire found them all due
	// and moved free past them (settle then drops them). Requires mu.
	q []*slot

	p   refill.Params // immutable after New; Cap is the queue bound in units
	clk refill.Clock  // immutable after New
}

// slot is one waiting caller's place in the queue: the outlet is its from
// stream value start for need units. The caller is admitted once V reaches
// start.
type slot struct {
	start, need int64  // requires Bucket.mu
	wake        func() // interrupts the caller's sleep; requires Bucket.mu
	gone        bool   // out of the queue: admitted, or left; requires Bucket.mu
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
// leak standing ahead of a caller arriving now, and 0 once they are more
// (a caller is queued with up to capacity units ahead of it, so the backlog
// behind the last one can reach twice the capacity). It is capacity when the
// outlet is free, the only time TryAcquire admits.
func (b *Bucket) Tokens() float64 {
	backlog := max(0, b.free.Load()-b.p.V(b.clk.Now()))
	return b.p.Float(max(0, b.p.Cap-backlog))
}

// reserve is the blocking step; see windowed.Reserve. It admits at once
// without the mutex when the outlet is free, as TryAcquireN does.
func (b *Bucket) reserve(n, limit int64) (int64, refill.Pending) {
	need := b.p.Units(n)
	now := b.clk.Now()
	v := b.p.V(now)
	for {
		free := b.free.Load()
		if free > v {
			break
		}
		if b.free.CompareAndSwap(free, v+need) {
			return 0, refill.Pending{}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		free := b.free.Load()
		b.settle(v, free)
		if free <= v {
			if b.free.CompareAndSwap(free, v+need) {
				return 0, refill.Pending{}
			}
			continue
		}
		if free-v > b.p.Cap {
			return windowed.Full, refill.Pending{}
		}
		wake := b.p.Reach(now, free)
		if wake > refill.Horizon {
			return windowed.Never, refill.Pending{}
		}
		if wake-now > limit {
			return wake - now, refill.Pending{}
		}
		if !b.free.CompareAndSwap(free, free+need) { // below V(Horizon) + Cap: no overflow
			continue // a TryAcquire found the queue due and moved free
		}
		// The allocation of a queued caller: its slot, which moves up
		// when a caller ahead leaves.
		s := &slot{start: free, need: need}
		b.q = append(b.q, s)
		return wake - now, refill.Pending{
			Undo:  func() bool { return b.leave(s) },
			Track: func(wake func()) int64 { return b.track(s, wake) },
		}
	}
}

// settle drops from the queue the slots that have come due at stream value
// v: a prefix, since slots are in order; all of them if free is no longer
// the end of the last, which only a TryAcquire that found them all due can
// have done. Requires mu.
func (b *Bucket) settle(v, free int64) {
	k := 0
	if last := len(b.q) - 1; last >= 0 && free != b.q[last].start+b.q[last].need {
		k = len(b.q)
	}
	for k < len(b.q) && b.q[k].start <= v {
		k++
	}
	for _, s := range b.q[:k] {
		s.gone, s.wake = true, nil
	}
	b.q = slices.Delete(b.q, 0, k)
}

// track is a waiter's check before each sleep (refill.Pending.Track): it
// returns the nanoseconds until its slot's instant, 0 once a reading under
// mu has reached it (the caller is admitted and out of the queue), and
// keeps wake for leave to call when the slot moves up.
func (b *Bucket) track(s *slot, wake func()) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !s.gone {
		b.settle(b.p.V(b.clk.Now()), b.free.Load())
	}
	if s.gone {
		return 0
	}
	s.wake = wake
	return max(1, b.clk.Until(b.p.Reach(0, s.start)))
}

// leave takes a waiter that gives up out of the queue and reports whether it
// was still waiting; false means its slot had come due and it is admitted.
// The slots behind it move up by its size and their sleepers are woken to
// sleep until their earlier instants.
func (b *Bucket) leave(s *slot) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !s.gone {
		b.settle(b.p.V(b.clk.Now()), b.free.Load())
	}
	if s.gone {
		return false
	}
	// The queue is non-empty and ends at free, as settle just saw. The
	// CompareAndSwap fails only if a TryAcquire has since found every slot
	// due (free <= V) and moved free: then s is admitted.
	last := b.q[len(b.q)-1]
	end := last.start + last.need
	if !b.free.CompareAndSwap(end, end-s.need) {
		b.settle(end, b.free.Load())
		return false
	}
	i := slices.Index(b.q, s)
	for _, t := range b.q[i+1:] {
		t.start -= s.need
		if t.wake != nil {
			t.wake()
			t.wake = nil
		}
	}
	s.gone = true
	b.q = slices.Delete(b.q, i, i+1)
	return true
}
