package buckettest

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/admit-go/admit"
)

// FakeClock is an admit.Clock that moves only when told to. Sleepers wake
// when Advance or Set passes their deadline, or when their context ends.
// It is safe for concurrent use. The zero value is a clock at 0 with no
// sleepers. A FakeClock must not be copied after first use.
type FakeClock struct {
	mu       sync.Mutex
	now      int64
	sleepers []*sleeper    // requires mu
	changed  chan struct{} // closed and replaced whenever sleepers change; requires mu
}

type sleeper struct {
	until int64
	wake  chan struct{} // closed by the clock when until is reached
}

var _ admit.Clock = (*FakeClock)(nil)

// NewFakeClock returns a FakeClock reading start.
func NewFakeClock(start int64) *FakeClock { return &FakeClock{now: start} }

// Now returns the clock's current reading.
func (c *FakeClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep blocks until the clock has moved d past the reading at the call, or
// until ctx ends, in which case it returns ctx.Err(). For d <= 0 it returns
// ctx.Err() at once.
func (c *FakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	c.mu.Lock()
	until := c.now + int64(d)
	if until < c.now {
		until = math.MaxInt64 // saturate: the clock never gets past it
	}
	s := &sleeper{until: until, wake: make(chan struct{})}
	if w, ok := ctx.Value(waiterKey{}).(*waiter); ok {
		w.asleep(s.until) // Waiters learns the deadline before Advance can pass it
		if w.deaf {
			s.until = math.MaxInt64 // only its context ends the sleep (Walk)
		}
	}
	c.sleepers = append(c.sleepers, s)
	c.notifyLocked()
	c.mu.Unlock()
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		if i := slices.Index(c.sleepers, s); i >= 0 {
			c.sleepers = slices.Delete(c.sleepers, i, i+1)
			c.notifyLocked()
		}
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Advance moves the clock forward by d (backward for negative d) and wakes
// every sleeper whose deadline it reaches.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.setLocked(c.now + int64(d))
	c.mu.Unlock()
}

// Set moves the clock to t, backward included, and wakes every sleeper whose
// deadline t reaches.
func (c *FakeClock) Set(t int64) {
	c.mu.Lock()
	c.setLocked(t)
	c.mu.Unlock()
}

func (c *FakeClock) setLocked(t int64) {
	c.now = t
	kept := c.sleepers[:0]
	for _, s := range c.sleepers {
		if s.until <= t {
			close(s.wake)
		} else {
			kept = append(kept, s)
		}
	}
	if len(kept) != len(c.sleepers) {
		clear(c.sleepers[len(kept):])
		c.sleepers = kept
		c.notifyLocked()
	}
}

// notifyLocked wakes WaitForSleepers callers. Requires mu.
func (c *FakeClock) notifyLocked() {
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// Sleepers returns the number of goroutines blocked in Sleep.
func (c *FakeClock) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sleepers)
}

// NextWake returns the earliest deadline among the sleepers, and false if
// there are none.
func (c *FakeClock) NextWake() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sleepers) == 0 {
		return 0, false
	}
	t := c.sleepers[0].until
	for _, s := range c.sleepers[1:] {
		t = min(t, s.until)
	}
	return t, true
}

// WaitForSleepers blocks until exactly n goroutines are blocked in Sleep, or
// ctx ends. It lets a test advance the clock only once the goroutines it
// started have computed their waits, without sleeping or polling.
func (c *FakeClock) WaitForSleepers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		if len(c.sleepers) == n {
			c.mu.Unlock()
			return nil
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
