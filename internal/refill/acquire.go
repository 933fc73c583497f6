package refill

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/admit-go/admit"
)

// start is the origin of the system clock here; time.Since on a Time that
// carries a monotonic reading reads the monotonic clock only, once.
var start = time.Now()

// Clock adapts an admit.Clock to elapsed nanoseconds since a bucket's
// creation, clamped to [0, Horizon]. The system clock is called directly
// rather than through the interface so that the hot path can inline it.
type Clock struct {
	c      admit.Clock // nil means the system clock
	origin int64       // reading at creation
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

func (c *Clock) raw() int64 {
	if c.c == nil {
		return int64(time.Since(start))
	}
	return c.c.Now()
}

// Now returns the elapsed nanoseconds since creation. A reading before
// creation is 0; one past the horizon is Horizon.
func (c *Clock) Now() int64 {
	now := c.raw()
	if now <= c.origin {
		return 0
	}
	if d := uint64(now) - uint64(c.origin); d < uint64(Horizon) {
		return int64(d)
	}
	return Horizon
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
// they will have been produced; if that is at most limit it also consumes
// them now, taking the balance below zero (a reservation), and returns an
// undo. Over limit, or Never, it consumes nothing and returns a nil undo.
//
// undo is called when the waiter gives up. It reports false once the
// reservation has come due: from then on the units belong to the caller, who
// counts as admitted at the wake time. Before that it reports true, and it
// gives the units back only by the tail rule (see Refund): if no later
// reservation has been stacked on them; otherwise they are forfeited.
type Reserve func(need, limit int64) (wait int64, undo func() bool)

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

// Block is the blocking loop every limiter of the module shares: the buckets
// through Acquire, the windowed limiters and the leaky bucket through
// windowed.Acquire. It checks n against max (noun names max in errors: "the
// capacity", "the limit"), then calls reserve with n<<shift units and the
// nanoseconds left before ctx's deadline. A negative wait is a special
// outcome (Never, a full queue), which special turns into the error to
// return; it is called on that path only, so the common ones pay nothing for
// it. Wait 0 means admitted at once; a wait with a nil undo exceeds the
// deadline (ErrDeadline); otherwise Block sleeps on clk until the
// reservation comes due. If ctx ends first, or the deadline no longer allows
// the wait (reserve may have waited for a lock), it calls undo, which reports
// whether the caller was still waiting (see Reserve): if so Block returns the
// error; if the reservation had come due meanwhile, the caller has its
// tokens and Block returns nil.
func Block(ctx context.Context, clk *Clock, n, max int64, noun string, shift uint, reserve Reserve, special func(n, wait int64) error) error {
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
	wait, undo := reserve(n<<shift, limit)
	switch {
	case wait == 0:
		return nil
	case wait < 0:
		return special(n, wait)
	case undo == nil:
		return fmt.Errorf("%w: n=%d is %v away, the deadline %v: %w", admit.ErrDeadline, n, time.Duration(wait), time.Until(dl), context.DeadlineExceeded)
	}
	if left := time.Until(dl); hasDeadline && left < time.Duration(wait) && undo() {
		return fmt.Errorf("%w: n=%d is %v away, the deadline %v: %w", admit.ErrDeadline, n, time.Duration(wait), left, context.DeadlineExceeded)
	}
	if err := clk.Sleep(ctx, time.Duration(wait)); err != nil && undo() {
		return err
	}
	return nil
}

// ValidN reports whether TryAcquireN(n) can proceed to the bucket: false
// for n < 0 or n above the capacity. n == 0 is handled by the caller.
func (p *Params) ValidN(n int64) bool { return n > 0 && n <= p.Cap>>p.Shift }
