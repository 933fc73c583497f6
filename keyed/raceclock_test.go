package keyed_test

import (
	"context"
	"time"
)

// raceClock is a clock that never runs backwards, on which a call's first
// reading may be stale: what a goroutine read before it lost a race to
// calls with later readings. Before each call the test says what that
// call's first reading is (read); every later reading, in the call or
// after it, is the clock's present, the latest reading so far. That is the
// real clock as a limiter's call sees it (a reading taken, then a delay),
// where buckettest.FakeClock set back is a clock that runs backwards,
// which admit.Clock asks not to. Not safe for concurrent use.
type raceClock struct {
	now     int64 // the present; never decreases
	reading int64 // the next read, if pending
	pending bool
}

func newRaceClock(now int64) *raceClock { return &raceClock{now: now} }

// read makes the next reading r (which may be before the present) and
// moves the present to r if r is later.
func (c *raceClock) read(r int64) {
	c.reading, c.pending = r, true
	c.now = max(c.now, r)
}

func (c *raceClock) Now() int64 {
	if c.pending {
		c.pending = false
		return c.reading
	}
	return c.now
}

func (c *raceClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }
