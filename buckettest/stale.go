package buckettest

import (
	"context"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
)

// dipClock is a FakeClock whose next readings can be queued, one call each:
// a clock that steps back for a reading and then forward again.
type dipClock struct {
	*FakeClock
	mu   sync.Mutex
	next []int64
}

func (c *dipClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.next) > 0 {
		r := c.next[0]
		c.next = c.next[1:]
		return r
	}
	return c.FakeClock.Now()
}

func (c *dipClock) queue(readings ...int64) {
	c.mu.Lock()
	c.next = readings
	c.mu.Unlock()
}

// backwardReadingInAcquire: a reading earlier than one already applied adds
// nothing (admit.Clock), and that holds inside AcquireN's blocking path too.
// There the wait was measured from the reservation's reading and the
// instant placed at a later reading plus that wait: a later reading 100 s
// back put the instant 100 s early, and the caller returned at once, before
// its token existed (five callers admitted at one instant from a bucket of
// capacity 1 at 1/s). Each caller here meets a true reading, then one 100 s
// back; it must sleep on the clock (it is admitted only when the clock
// reaches its instant, which the test never lets it do) or return an error.
func (s suite) backwardReadingInAcquire(t *testing.T) {
	clk := &dipClock{FakeClock: NewFakeClock(start)}
	l, err := s.make(1, 1, admit.WithClock(clk))
	require.NoError(t, err)
	clk.Set(start + 200*second)
	require.True(t, l.TryAcquire(), "a full bucket")
	for i := range 5 {
		now := clk.FakeClock.Now()
		clk.queue(now, now-100*second)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.AcquireN(ctx, 1) }()
		asleep := make(chan error, 1)
		go func() { asleep <- clk.WaitForSleepers(ctx, 1) }()
		select {
		case err := <-done:
			cancel()
			<-asleep
			require.Error(t, err, "caller %d admitted at once, with the bucket empty and the clock stopped", i)
		case <-asleep:
			cancel()
			require.ErrorIs(t, <-done, context.Canceled, "caller %d", i)
		}
		clk.queue()
	}
}

// tokensFloor: ⌊Tokens()⌋ is what TryAcquireN admits at that instant. At a
// capacity of 1e9 and 0.4/s a token is 2^31 units, and a balance a few
// units short of the capacity, converted to float64 to nearest, read as
// the full capacity while TryAcquireN(1e9) refused.
func (s suite) tokensFloor(t *testing.T) {
	l, clk := s.fake(t, 1e9, 0.4)
	require.True(t, l.TryAcquireN(1e9), "a new bucket holds its capacity")
	// 2.5e9 s is the whole refill; 20 ns short of it is a few units short.
	clk.Set(start + 25e17 - 20)
	tok := l.Tokens()
	k := int64(math.Floor(tok))
	if k < 1e9 {
		require.False(t, l.TryAcquireN(k+1), "Tokens() = %v, but TryAcquireN(%d) admitted", tok, k+1)
	}
	require.True(t, l.TryAcquireN(k), "Tokens() = %v, but TryAcquireN(%d) refused", tok, k)
}
