// Package gcra implements the generic cell rate algorithm: a token bucket
// whose whole state is one word, the theoretical arrival time.
//
// GCRA, from ATM networks, keeps the time at which the next cell would be
// exactly on schedule and admits a cell that arrives no earlier than that
// time minus a burst tolerance. Here the time is kept on the rate's stream
// (internal/refill's integer units, the same V, Units and When as the other
// buckets), and the tolerance is the capacity: the bucket stores z, the
// stream value at which it would be empty. Its balance at elapsed time t is
// min(capacity, V(t) − z), and taking n units is one CompareAndSwap of z to
// max(z, V(t) − capacity) + n. That is exactly a token bucket, rule for
// rule and unit for unit, so it runs the same conformance suite
// (buckettest.Run) as mutexbucket, casbucket and shardedbucket.
//
// # One word instead of a pair
//
// casbucket needs an atomic.Pointer to an immutable (tokens, last) pair,
// and so one allocation per admission, because a balance is meaningless
// without the time it was computed for. GCRA folds the pair into one
// number: time lives in V, a pure function of the clock reading, so the
// state needs no timestamp, and one atomic.Int64 holds everything. A
// decision is a load, a little integer arithmetic and one CompareAndSwap;
// nothing is allocated and a rejection writes nothing.
//
// Time. Keeping no timestamp also means keeping no latest reading. A clock
// reading older than one already applied sees the balance of that earlier
// moment, which is smaller (min(capacity, V(t) − z) grows with t): it can
// only see fewer tokens, never more, and a rejection stores nothing.
// mutexbucket and casbucket instead treat a stale reading as the latest one
// applied; shardedbucket, one word per shard, keeps no latest reading
// either. On a clock that never runs backwards gcra and mutexbucket decide
// identically (FuzzReservations checks it).
//
// Pick it over casbucket whenever you would pick casbucket: the same
// lock-free design without the allocation. Like casbucket, every admission
// writes the one shared word, so admissions from many cores contend on one
// cache line; for that, see shardedbucket. See the README for measured
// numbers.
//
// Blocking: a caller that must wait moves z past the stream value it needs
// (the balance goes below zero, a reservation) and sleeps until V reaches
// it. Cancelling gives the units back by the tail rule (refill's
// reservation proof): the undo is a CompareAndSwap of z from exactly the
// value this reservation set back to the value it found, so it succeeds only
// if nothing was admitted or reserved after it, and a stale reading or a
// pause before the swap cannot resurrect units.
package gcra

import (
	"context"
	"sync/atomic"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
)

// Bucket is a GCRA token bucket. It is safe for concurrent use. The zero
// value is not usable; create one with New. A Bucket must not be copied
// after first use.
//
// Fairness: a blocked AcquireN reserves its tokens when it starts waiting
// (the balance goes below zero) and sleeps until they exist, so waiters are
// admitted in the order their reservations land, exactly at the rate, and
// no later caller, TryAcquire included, overtakes them.
type Bucket struct {
	_ noCopy
	z atomic.Int64 // empty point on the stream: balance = min(Cap, V(now) − z)

	p   refill.Params // immutable after New
	clk refill.Clock  // immutable after New

	// debtUntil is the latest wake of any reservation: before it, a
	// balance below zero may be a reservation's debt rather than a stale
	// reading, and Tokens reports it. Only a reservation writes it, right
	// after its CAS on z, so sharing z's cache line costs nothing the CAS
	// has not already paid, and keeps a Bucket small (it is the per-key
	// state of a keyed table).
	debtUntil atomic.Int64
}

var _ admit.Limiter = (*Bucket)(nil)

// noCopy makes go vet's copylocks check flag copies of a Bucket.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

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
	b := &Bucket{p: p, clk: refill.NewClock(cfg.Clock)}
	b.z.Store(-p.Cap) // V(0) = 0: full
	return b, nil
}

// NoLatestReading declares that the bucket keeps no latest clock reading:
// a stale reading sees the smaller balance of its own moment. buckettest
// checks that rule for limiters that declare it.
func (*Bucket) NoLatestReading() {}

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
	now := b.clk.Now()
	bal := min(b.p.Cap, b.p.V(now)-b.z.Load())
	if now >= b.debtUntil.Load() {
		bal = max(bal, 0) // no reservation is waiting: below zero is only a stale reading
	}
	return b.p.Float(bal)
}

// take consumes need units if they are there and reports whether it did.
func (b *Bucket) take(need int64) bool {
	v := b.p.V(b.clk.Now())
	for {
		z := b.z.Load()
		base := max(z, v-b.p.Cap) // refill beyond the capacity is discarded
		if v-base < need {
			return false // loads only: nothing written
		}
		if b.z.CompareAndSwap(z, base+need) {
			return true
		}
	}
}

// reserve is the blocking step; see refill.Reserve and refill.ReserveWord.
func (b *Bucket) reserve(need, limit int64) (int64, int64, func() bool) {
	now := b.clk.Now()
	wait, z, end := b.p.ReserveWord(&b.z, &b.debtUntil, now, need, limit)
	if wait <= 0 || wait > limit {
		return wait, now, nil
	}
	return wait, now, func() bool {
		if b.p.V(b.clk.Now()) >= end {
			return false // due: the tokens are the caller's
		}
		// Tail rule: z still holds exactly what this reservation set only
		// if nothing was taken or reserved after it (z only grows, except
		// through such undos, newest first). Restoring z is then exactly
		// the state before the reservation; otherwise the units are
		// forfeited.
		b.z.CompareAndSwap(end, z)
		return true
	}
}
