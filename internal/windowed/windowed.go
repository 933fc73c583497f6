// Package windowed holds what the windowed limiters (fixedwindow, slidinglog,
// slidingwindow) and the leaky bucket share: validation of a limit and a
// window, the blocking loop over a reservation, and the tail rule's
// bookkeeping (Tail).
//
// Time is the elapsed nanoseconds of a refill.Clock: clamped to
// [0, refill.Horizon] from the limiter's creation, so that window indices
// and the products below never overflow.
package windowed

import (
	"context"
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
)

// MaxWindow is the longest window accepted: 2^60 ns, about 36.5 years. With
// elapsed times below 2^62, a window index times the window, plus one window,
// stays below 2^63.
const MaxWindow = time.Duration(1) << 60

// MaxLimit is the largest limit the counting limiters accept: 2^40 (about
// 1.1e12). Counts plus a request stay far below 2^63, and the weighted
// estimate's products fit the 128-bit arithmetic of slidingwindow.
const MaxLimit = int64(1) << 40

// Validate checks a (limit, window) pair against [1, maxLimit] and
// [1ns, MaxWindow]. Errors wrap admit.ErrInvalidConfig and name the value.
func Validate(limit int64, window time.Duration, maxLimit int64) error {
	switch {
	case limit < 1:
		return fmt.Errorf("%w: limit %d is below 1", admit.ErrInvalidConfig, limit)
	case limit > maxLimit:
		return fmt.Errorf("%w: limit %d is above %d", admit.ErrInvalidConfig, limit, maxLimit)
	case window < 1:
		return fmt.Errorf("%w: window %v is not positive", admit.ErrInvalidConfig, window)
	case window > MaxWindow:
		return fmt.Errorf("%w: window %v is above %v", admit.ErrInvalidConfig, window, MaxWindow)
	}
	return nil
}

// Special results of a Reserve.
const (
	// Never: no amount of waiting admits the request within the horizon.
	Never = -1
	// Full: the limiter's queue is full (leakybucket); the request is
	// rejected at once rather than queued.
	Full = -2
)

// Reserve is a limiter's blocking step, taken under its own
// synchronisation. It admits n now if it can and returns wait 0. Otherwise it
// computes the earliest elapsed time at which the algorithm would admit n
// without overtaking anyone already waiting; if that is at most limit
// nanoseconds away it records the admission at that time (a reservation)
// and returns the wait and the reservation: its instant (At, on the
// limiter's clock, so that the caller sleeps until a reading reaches it
// whatever reading the wait was measured from) and its Undo. Over limit,
// Never or Full, it changes nothing and returns a zero Pending.
//
// Undo reports false if the reservation had already come due, in which
// case the caller is admitted and nothing changes. Otherwise it reports true:
// the caller is not admitted, and the reservation is undone only if no later
// admission or reservation has been built on it (the tail rule): later
// waiters were placed behind it and keep their times, so a reservation below
// the tail stays recorded, unused, rather than letting a new caller in beside
// them. Either way, the limiter never admits more than its bound allows: an
// undo restores exactly the state before the reservation, and an abandoned
// reservation only leaves a slot unused. (The leaky bucket's queue is the
// exception: a caller that leaves it lets the callers behind move up, which
// Pending.Track tells their sleeps.)
type Reserve func(n, limit int64) (wait int64, p refill.Pending)

// Acquire is the blocking path, refill.BlockAt over reserve: validate n
// against max, reserve, sleep until the reservation's instant, undo on
// cancellation. noun names what max bounds in error messages ("the limit",
// "the capacity").
func Acquire(ctx context.Context, clk *refill.Clock, max int64, noun string, n int64, reserve Reserve) error {
	special := func(n, wait int64) error {
		if wait == Full {
			return fmt.Errorf("%w: n=%d: the queue is at %s %d", admit.ErrQueueFull, n, noun, max)
		}
		return fmt.Errorf("%w: n=%d: no admission before the clock's horizon", admit.ErrUnsatisfiable, n)
	}
	return refill.BlockAt(ctx, clk, n, max, noun, 0, reserve, special)
}

// Now returns max(clk.Now(), *last) and stores it in *last: the limiters
// that keep a latest reading treat a stale one as that latest reading, so
// time never runs backwards for them. The caller holds the lock guarding
// *last.
func Now(clk *refill.Clock, last *int64) int64 {
	now := max(clk.Now(), *last)
	*last = now
	return now
}

// Tail numbers a limiter's reservations so that an undo can tell whether its
// reservation is still the last change to the state: the tail rule of
// Reserve. The zero value is ready; every method requires the limiter's lock.
type Tail struct {
	top uint64 // id of the reservation that made the state, 0 if an admission came after it
	ids uint64 // reservation ids handed out
}

// Admitted records an admission on top of the state: no reservation below
// it can be undone any more.
func (t *Tail) Admitted() { t.top = 0 }

// Push records a reservation on top of the state and returns its id and the
// top it covers, for Pop.
func (t *Tail) Push() (id, below uint64) {
	t.ids++
	below, t.top = t.top, t.ids
	return t.ids, below
}

// Pop reports whether reservation id is still on top and, if it is, removes
// it, making below the top again; the caller then restores the state it
// saved before Push.
func (t *Tail) Pop(id, below uint64) bool {
	if t.top != id {
		return false
	}
	t.top = below
	return true
}
