// Package casbucket implements a lock-free token bucket: a compare-and-swap
// loop on an atomic.Pointer to an immutable (tokens, last) state.
//
// A call reads the clock, loads the current state, derives the refilled
// balance from it, and, to admit, publishes a freshly allocated state with
// CompareAndSwap. A failed swap means another caller published first, so the
// loop reloads and decides again; it never gives up and admits. A reject
// only loads: it writes nothing and allocates nothing, so rejections scale
// across cores. (The one exception: a call that lost a CAS race and then
// finds the bucket short has already allocated the state it meant to
// publish; a call that finds it short on the first look never allocates.)
//
// Why a pointer to a pair and not two atomics: the balance is only meaningful
// together with the time it was computed for. With tokens and last in
// separate atomic words, a caller could swap tokens and, before it stores
// last, another caller loads the new tokens with the old last and refills
// the same interval a second time, over-admitting; no order of the two
// stores avoids every such interleaving. Publishing both behind one pointer
// makes the pair change together, at the cost of one 16-byte allocation per
// admission.
//
// Pick it over mutexbucket when many goroutines share a bucket that rejects
// often, or when a preempted lock holder must not stall everyone else. Its
// admit path costs one allocation and one CAS; under contention on admits it
// retries instead of queueing, and the shared word's cache line still moves
// between cores on every admission, so it does not scale admits: for that,
// see shardedbucket. See the README for measured numbers.
package casbucket

import (
	"context"
	"sync/atomic"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
)

// state is immutable once published: the pair changes together, so it lives
// behind one pointer.
type state struct {
	tokens int64 // balance in units as of last, below 0 while reservations wait
	last   int64 // elapsed ns of the latest clock reading applied
}

// Bucket is a lock-free token bucket. It is safe for concurrent use. The
// zero value is not usable; create one with New. A Bucket must not be
// copied after first use.
//
// Fairness: a blocked AcquireN reserves its tokens when it starts waiting
// (the balance goes below zero) and sleeps until they exist, so waiters are
// admitted in the order their reservations land, exactly at the rate, and
// no later caller, TryAcquire included, overtakes them. Cancelling gives the
// tokens back unless a later waiter's reservation is stacked on them (see
// admit.Limiter).
type Bucket struct {
	_  noCopy
	st atomic.Pointer[state]

	p   refill.Params // immutable after New
	clk refill.Clock  // immutable after New
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
	b.st.Store(&state{tokens: p.Cap})
	return b, nil
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
	s := b.st.Load()
	bal, _ := b.p.Refill(s.tokens, s.last, b.clk.Now())
	return b.p.Float(bal)
}

// take consumes need units if they are there and reports whether it did.
func (b *Bucket) take(need int64) bool {
	// One clock reading serves every retry. A later-published state may
	// carry a later time than now; Refill then adds nothing and keeps that
	// time, so a retry decides on fewer tokens, never more.
	now := b.clk.Now()
	var next *state
	for {
		s := b.st.Load()
		bal, at := b.p.Refill(s.tokens, s.last, now)
		if bal < need {
			return false // loads only: nothing written, nothing allocated
		}
		// The one allocation of the admit path: the new immutable state.
		// Until a swap publishes it, it is private and reused by retries.
		if next == nil {
			next = new(state)
		}
		*next = state{tokens: bal - need, last: at}
		if b.st.CompareAndSwap(s, next) {
			return true
		}
	}
}

// reserve is the blocking step; see refill.Reserve.
func (b *Bucket) reserve(need, limit int64) (int64, int64, func() bool) {
	now := b.clk.Now()
	for {
		s := b.st.Load()
		bal, at := b.p.Refill(s.tokens, s.last, now)
		wake := now
		if bal < need {
			var ok bool
			if wake, ok = b.p.Wake(bal, at, need); !ok {
				return refill.Never, now, nil
			}
			if wake-now > limit {
				return wake - now, now, nil
			}
		}
		// Below zero when waiting: later callers queue behind.
		next := &state{tokens: bal - need, last: at}
		if b.st.CompareAndSwap(s, next) {
			if wake == now {
				return 0, now, nil
			}
			end := b.p.EmptyPoint(next.tokens, next.last)
			return wake - now, now, func() bool { return b.refund(need, end) }
		}
	}
}

// refund undoes a reservation of need units that left the empty point at
// end, by the tail rule of refill.Refund, and reports whether it was still
// waiting (false once it has come due). The rule reads only the state it
// swaps out, so a stale clock reading cannot mislead it: a state published
// meanwhile fails the swap and is judged afresh.
func (b *Bucket) refund(need, end int64) bool {
	now := b.clk.Now()
	for {
		s := b.st.Load()
		tokens, last, due := b.p.Refund(s.tokens, s.last, now, need, end)
		if due || (tokens == s.tokens && last == s.last) {
			return !due // come due, or forfeited: nothing to publish
		}
		if b.st.CompareAndSwap(s, &state{tokens: tokens, last: last}) {
			return true
		}
	}
}
