package refill

import (
	"context"
	"fmt"
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

// Never is what a wait function returns when no amount of waiting helps.
const Never = -1

// Acquire is the blocking loop shared by every bucket. take tries to consume
// need units now and reports whether it did; it consumes nothing otherwise.
// wait returns the nanoseconds until need units could be there, from the
// bucket as it is now (0 or less if they already are), or Never. It is only
// called after take failed, so rejections on the non-blocking path never pay
// for computing a wait.
//
// There is no queue: waiters sleep for their own computed wait and retry, so
// cancelling one leaves nothing behind, and waiters that wake together race
// for what the rate produced meanwhile. The rate bounds admissions, so they
// come at the rate and never in a burst; order among waiters is not FIFO.
func Acquire(ctx context.Context, clk *Clock, p *Params, n int64, take func(need int64) bool, wait func(need int64) int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case n == 0:
		return nil
	case n < 0:
		return fmt.Errorf("%w: n=%d is negative", admit.ErrUnsatisfiable, n)
	case n > p.Cap>>p.Shift:
		return fmt.Errorf("%w: n=%d exceeds the capacity %d", admit.ErrUnsatisfiable, n, p.Cap>>p.Shift)
	}
	need := p.Units(n)
	for !take(need) {
		w := wait(need)
		switch {
		case w == Never:
			return fmt.Errorf("%w: n=%d: too few tokens and no refill (rate 0, or the clock is past its horizon)", admit.ErrUnsatisfiable, n)
		case w <= 0:
			continue // another caller put tokens back meanwhile: retry at once
		}
		d := time.Duration(w)
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < d {
				return fmt.Errorf("%w: n=%d is %v away, the deadline %v: %w", admit.ErrDeadline, n, d, left, context.DeadlineExceeded)
			}
		}
		if err := clk.Sleep(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// ValidN reports whether TryAcquireN(n) can proceed to the bucket: false
// for n < 0 or n above the capacity. n == 0 is handled by the caller.
func (p *Params) ValidN(n int64) bool { return n > 0 && n <= p.Cap>>p.Shift }

// Wait returns the nanoseconds from now until the elapsed time at, or Never
// when at is past the horizon.
func Wait(now, at int64) int64 {
	if at > Horizon {
		return Never
	}
	return at - now
}
