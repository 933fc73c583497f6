// Package mutexbucket implements a token bucket guarded by one sync.Mutex.
// It is the module's reference implementation: the other buckets are tested
// against it.
//
// The bucket stores (tokens, last): the balance, in integer units of 2^-k
// tokens, as of the elapsed time last. Every call locks, reads the clock,
// refills lazily from last to now, checks and consumes, and unlocks; no
// goroutine runs in the background. Reading the clock inside the lock is what
// makes the step atomic: a caller that read an earlier time outside the lock
// could apply it after a later one and refill twice for the same interval,
// which is how x/time/rate can over-admit under contention.
//
// Pick it when calls are not heavily concurrent, when you want the simplest
// code to audit, or as the baseline to measure the others against. Its cost
// is one uncontended lock hand-off (two atomic read-modify-writes) on top of
// the clock read; under contention every caller, rejected ones included,
// queues on the lock, and the clock read sits inside the critical section.
// See the README for measured numbers.
package mutexbucket

import (
	"context"
	"sync"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
)

// Bucket is a token bucket. It is safe for concurrent use. The zero value
// is not usable; create one with New. A Bucket must not be copied after
// first use.
//
// Fairness: a blocked AcquireN reserves its tokens when it starts waiting
// (the balance goes below zero) and sleeps until they exist, so waiters are
// admitted in arrival order, exactly at the rate, and no later caller,
// TryAcquire included, overtakes them. Cancelling gives the tokens back
// unless a later waiter's reservation is stacked on them (see
// admit.Limiter).
type Bucket struct {
	mu     sync.Mutex
	tokens int64 // balance in units as of last, below 0 while reservations wait; requires mu
	last   int64 // elapsed ns of the latest clock reading applied; requires mu

	p   refill.Params // immutable after New
	clk refill.Clock  // immutable after New
}

var _ admit.Limiter = (*Bucket)(nil)

// New returns a full bucket holding capacity tokens that refills at
// refillPerSecond tokens per second. It returns an error wrapping
// admit.ErrInvalidConfig for a capacity below 1, a rate that is negative,
// NaN or infinite, or one the bucket cannot represent (above 1e9/s, or too
// small for the capacity); every capacity in [1, 1e9] and every rate 0 or in
// [1e-6, 1e9] is accepted.
func New(capacity int64, refillPerSecond float64, opts ...admit.Option) (*Bucket, error) {
	cfg, err := admit.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	p, err := refill.NewParams(capacity, refillPerSecond)
	if err != nil {
		return nil, err
	}
	return &Bucket{tokens: p.Cap, p: p, clk: refill.NewClock(cfg.Clock)}, nil
}

// TryAcquire consumes one token if one is available and reports whether it
// did.
func (b *Bucket) TryAcquire() bool { return b.take(b.p.Units(1)) }

// TryAcquireN consumes n tokens if all are available and reports whether it
// did. TryAcquireN(0) is true; n < 0 or n > capacity is false.
func (b *Bucket) TryAcquireN(n int64) bool {
	if n == 0 {
		return true
	}
	return b.p.ValidN(n) && b.take(b.p.Units(n))
}

// Acquire blocks until one token is consumed; see AcquireN.
func (b *Bucket) Acquire(ctx context.Context) error { return b.AcquireN(ctx, 1) }

// AcquireN blocks until n tokens are consumed or ctx ends, as documented on
// admit.Limiter. It sleeps on the bucket's Clock for the computed wait.
func (b *Bucket) AcquireN(ctx context.Context, n int64) error {
	return refill.Acquire(ctx, &b.clk, &b.p, n, b.reserve)
}

// Tokens returns the current balance. It is negative while blocked
// AcquireN calls hold reservations, and until the refill has covered a
// cancelled reservation that was forfeited (see admit.Limiter).
func (b *Bucket) Tokens() float64 {
	b.mu.Lock()
	bal, _ := b.p.Refill(b.tokens, b.last, b.clk.Now())
	b.mu.Unlock()
	return b.p.Float(bal)
}

// take consumes need units if they are there and reports whether it did.
func (b *Bucket) take(need int64) bool {
	b.mu.Lock()
	now := b.clk.Now() // inside the lock: see the package doc
	bal, at := b.p.Refill(b.tokens, b.last, now)
	ok := bal >= need
	if ok {
		b.tokens, b.last = bal-need, at
	}
	// A reject stores nothing: the next call recomputes the same refill
	// from the same (tokens, last), exactly.
	b.mu.Unlock()
	return ok
}

// reserve is the blocking step; see refill.Reserve.
func (b *Bucket) reserve(need, limit int64) (int64, int64, func() bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	bal, at := b.p.Refill(b.tokens, b.last, now)
	if bal >= need {
		b.tokens, b.last = bal-need, at
		return 0, now, nil
	}
	wake, ok := b.p.Wake(bal, at, need)
	if !ok {
		return refill.Never, now, nil
	}
	if wait := wake - now; wait > limit {
		return wait, now, nil
	}
	b.tokens, b.last = bal-need, at // below zero: later callers queue behind
	end := b.p.EmptyPoint(b.tokens, b.last)
	return wake - now, now, func() bool { return b.refund(need, end) }
}

// refund undoes a reservation of need units that left the empty point at
// end, by the tail rule of refill.Refund, and reports whether it was still
// waiting (false once it has come due).
func (b *Bucket) refund(need, end int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	tokens, last, due := b.p.Refund(b.tokens, b.last, b.clk.Now(), need, end)
	b.tokens, b.last = tokens, last
	return !due
}
