package refill

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/tsc"
)

// Clock adapts an admit.Clock to elapsed nanoseconds since a bucket's
// creation, clamped to [0, Horizon]. The system clock is called directly
// rather than through the interface so that the hot path can inline it.
type Clock struct {
	c      admit.Clock // nil means the system clock
	origin int64       // reading at creation
	tsc    bool        // the system clock is read through tsc.Now
}

// NewClock returns a Clock whose elapsed time starts now. A nil c means the
// system clock.
func NewClock(c admit.Clock) Clock {
	if c == admit.SystemClock() {
		c = nil
	}
	clk := Clock{c: c}
	clk.origin = clk.raw()
	return clk
}

// NewCounterClock is NewClock for the hot paths that read the clock on
// every call (keyed): the system clock is read through the processor's
// timestamp counter where package tsc supports it (linux/amd64 with an
// invariant counter that the kernel uses too): in steady state never
// ahead of the monotonic clock and at most the lag package tsc states
// behind it, under the assumptions it states and checks.
// Any other clock, and the system clock elsewhere, is NewClock's.
func NewCounterClock(c admit.Clock) Clock {
	if c != nil && c != admit.SystemClock() || !tsc.Enable() {
		return NewClock(c)
	}
	clk := Clock{tsc: true}
	clk.origin = clk.raw()
	return clk
}

func (c *Clock) raw() int64 {
	if c.tsc { // only for the system clock
		return tsc.Now()
	}
	if c.c == nil {
		return tsc.Mono() // the runtime's monotonic clock, what time.Since reads
	}
	return c.c.Now()
}

// Now returns the elapsed nanoseconds since creation. A reading before
// creation is 0; one past the horizon is Horizon.
func (c *Clock) Now() int64 { return c.elapsed(c.raw()) }

// elapsed returns the raw reading now as elapsed nanoseconds since
// creation, clamped to [0, Horizon].
func (c *Clock) elapsed(now int64) int64 {
	if now <= c.origin {
		return 0
	}
	if d := uint64(now) - uint64(c.origin); d < uint64(Horizon) {
		return int64(d)
	}
	return Horizon
}

// Fresh is Now read from the monotonic clock itself, never through the
// timestamp counter: for the system clock the kernel's ordered read (the
// vDSO's RDTSCP, or LFENCE and RDTSC), which waits for every earlier
// instruction of the caller, an atomic write included, and is never behind
// a counter reading taken before it (package tsc's readings are never
// ahead of the monotonic clock). A caller that has just stopped others
// from deciding (a CAS they would have to see) reads here a time no
// earlier than any reading those decisions applied, as long as the clock
// does not run backwards. Any other clock is read through its Now.
func (c *Clock) Fresh() int64 {
	if c.tsc {
		return c.elapsed(tsc.Mono())
	}
	return c.Now()
}

// Until returns the nanoseconds from the clock's reading to the elapsed
// instant at (0 <= at <= Horizon), without Now's clamp: a reading before
// creation is that much further from at. It is zero or negative once the
// reading has reached at, and saturates at math.MaxInt64.
func (c *Clock) Until(at int64) int64 {
	now := c.raw()
	if now > c.origin {
		return at - int64(min(uint64(now)-uint64(c.origin), uint64(Horizon)))
	}
	gap := uint64(c.origin) - uint64(now) // how far before creation, exact
	if gap > uint64(math.MaxInt64-at) {
		return math.MaxInt64
	}
	return at + int64(gap)
}

// Sleep sleeps on the underlying clock.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if c.c == nil {
		return admit.SystemClock().Sleep(ctx, d)
	}
	return c.c.Sleep(ctx, d)
}

// Never is what a reserve function returns when no amount of waiting helps.
const Never = -1

// maxDebt bounds how far reservations may take a balance below zero, so
// that no sum of a balance, a request and a stream value overflows.
const maxDebt = -int64(1) << 62

// Deficit returns how many units must be produced before a balance of bal
// covers need, and false if that would take the balance below maxDebt.
func Deficit(bal, need int64) (int64, bool) {
	if bal-need < maxDebt {
		return 0, false
	}
	return need - bal, true
}

// Reserve is a bucket's blocking step. It consumes need units now if they
// are there and returns wait 0. Otherwise it returns the nanoseconds until
// they will have been produced, counted from the reading of clk.Now() it
// took, and that reading (from, elapsed); if the wait is at most limit it also consumes
// them now, taking the balance below zero (a reservation), and returns an
// undo. Over limit, or Never, it consumes nothing and returns a nil undo.
//
// undo is called when the waiter gives up. It reports false once the
// reservation has come due: from then on the units belong to the caller, who
// counts as admitted at the wake time. Before that it reports true, and it
// gives the units back only by the tail rule (see Refund): if no later
// reservation has been stacked on them; otherwise they are forfeited.
type Reserve func(need, limit int64) (wait, from int64, undo func() bool)

// Acquire is the blocking path shared by every bucket.
//
// A caller that must wait reserves its tokens at once and sleeps until they
// exist, so waiters are served in the order they arrived and later callers,
// TryAcquire included, cannot overtake them; admissions follow the rate
// exactly however late the timer wakes a sleeper. If ctx ends first, the
// caller returns ctx.Err() and its reservation is undone by the tail rule
// (see Refund); if ctx ends only after the tokens came due, the caller has
// them and Acquire returns nil.
func Acquire(ctx context.Context, clk *Clock, p *Params, n int64, reserve Reserve) error {
	return Block(ctx, clk, n, p.Cap>>p.Shift, "the capacity", p.Shift, reserve, never)
}

// never is the buckets' only special wait: Never.
func never(n, _ int64) error {
	return fmt.Errorf("%w: n=%d: too few tokens and no refill in time (rate 0, or past the clock's horizon)", admit.ErrUnsatisfiable, n)
}

// Block is the blocking loop of the buckets, BlockAt over a Reserve whose
// wait counts from the reading of clk.Now() it took and returned: the
// reservation's instant is that reading plus the wait, exactly. (A second
// reading taken after reserve returned would place it early on a clock that
// steps back in between, and the caller would return before its tokens
// exist.) The caller sleeps until the clock reaches the instant, so a
// reading before creation (which Now clamps to 0) does not wake it early.
func Block(ctx context.Context, clk *Clock, n, max int64, noun string, shift uint, reserve Reserve, special func(n, wait int64) error) error {
	at := func(need, limit int64) (int64, Pending) {
		wait, from, undo := reserve(need, limit)
		if wait <= 0 || undo == nil {
			return wait, Pending{}
		}
		// A wait reaches at most Horizon past a reading in [0, Horizon]:
		// the sum fits, and is at most Horizon, since the reservation is.
		return wait, Pending{At: min(from+wait, Horizon), Undo: undo}
	}
	return BlockAt(ctx, clk, n, max, noun, shift, at, special)
}

// Pending is a reservation a caller sleeps on in BlockAt.
type Pending struct {
	// At is the reservation's instant, in elapsed nanoseconds on the
	// limiter's clock: the caller returns admitted only once a reading of
	// the clock has reached it.
	At int64
	// Undo is called when the caller gives up; it reports whether the
	// caller was still waiting (see Reserve).
	Undo func() bool
	// Track, if set, makes the instant movable: a reservation whose
	// instant can move earlier while its caller sleeps (the leaky bucket's
	// queue moves up when a caller ahead leaves it). Then At is not used:
	// BlockAt calls Track before each sleep, and Track decides under the
	// limiter's own synchronisation. It returns the nanoseconds left until
	// the current instant, from a reading it takes there; zero or less means
	// the reading has reached the instant and the caller is admitted.
	// Otherwise it keeps wake and calls it, at most once, if the instant
	// moves earlier, which interrupts the sleep.
	Track func(wake func()) (left int64)
}

// BlockAt is the blocking loop every limiter of the module shares: the
// buckets through Acquire and Block, the windowed limiters and the leaky
// bucket through windowed.Acquire. It checks n against max (noun names max in
// errors: "the capacity", "the limit"), then calls reserve with n<<shift
// units and the nanoseconds left before ctx's deadline. A negative wait is a
// special outcome (Never, a full queue), which special turns into the error
// to return; it is called on that path only, so the common ones pay nothing
// for it. Wait 0 means admitted at once; a wait with a nil Undo exceeds the
// deadline (ErrDeadline); otherwise BlockAt sleeps on clk until a reading of
// clk reaches the reservation's instant, sleeping again if a sleep ends
// early (a clock read behind the limiter's latest reading, or one before its
// creation). If ctx ends first, or the deadline no longer allows the wait
// (reserve may have waited for a lock), it calls Undo, which reports whether
// the caller was still waiting: if so BlockAt returns the error; if the
// reservation had come due meanwhile, the caller has its tokens and BlockAt
// returns nil.
func BlockAt(ctx context.Context, clk *Clock, n, max int64, noun string, shift uint, reserve func(need, limit int64) (int64, Pending), special func(n, wait int64) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case n == 0:
		return nil
	case n < 0:
		return fmt.Errorf("%w: n=%d is negative", admit.ErrUnsatisfiable, n)
	case n > max:
		return fmt.Errorf("%w: n=%d exceeds %s %d", admit.ErrUnsatisfiable, n, noun, max)
	}
	limit := int64(math.MaxInt64)
	dl, hasDeadline := ctx.Deadline()
	if hasDeadline {
		limit = int64(time.Until(dl))
	}
	wait, p := reserve(n<<shift, limit)
	switch {
	case wait == 0:
		return nil
	case wait < 0:
		return special(n, wait)
	case p.Undo == nil:
		return fmt.Errorf("%w: n=%d is %v away, the deadline %v: %w", admit.ErrDeadline, n, time.Duration(wait), time.Until(dl), context.DeadlineExceeded)
	}
	if left := time.Until(dl); hasDeadline && left < time.Duration(wait) && p.Undo() {
		return fmt.Errorf("%w: n=%d is %v away, the deadline %v: %w", admit.ErrDeadline, n, time.Duration(wait), left, context.DeadlineExceeded)
	}
	// The instant, not the wait, decides: the wait was measured from the
	// limiter's reading, which may be later than the reading the sleep
	// starts from (the limiter keeps its latest, or clamps one before its
	// creation to 0), so one sleep of wait can end before the instant. A
	// sleep on the real clock ends at or after it, so the loop costs one more
	// clock reading.
	for {
		sleep, stop := ctx, context.CancelFunc(nil)
		var d int64
		if p.Track != nil {
			// The allocation of a movable reservation: a context per sleep
			// that its queue can cancel when the instant moves earlier.
			sleep, stop = context.WithCancel(ctx)
			d = p.Track(stop)
		} else {
			d = clk.Until(p.At)
		}
		if d <= 0 {
			if stop != nil {
				stop()
			}
			return nil
		}
		err := clk.Sleep(sleep, time.Duration(d))
		if stop != nil {
			stop()
		}
		if err == nil {
			continue
		}
		if ctx.Err() == nil && stop != nil {
			continue // the instant moved: sleep again until the new one
		}
		if p.Undo() {
			return err
		}
		return nil
	}
}

// ValidN reports whether TryAcquireN(n) can proceed to the bucket: false
// for n < 0 or n above the capacity. n == 0 is handled by the caller.
func (p *Params) ValidN(n int64) bool { return n > 0 && n <= p.Cap>>p.Shift }

// Counter reports whether the clock reads the system clock through the
// timestamp counter (NewCounterClock on a machine package tsc supports).
func (c *Clock) Counter() bool { return c.tsc }
