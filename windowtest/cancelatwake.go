package windowtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// deafClock is a fake clock whose Sleep hears only its context, never the
// clock: a test can move the clock to a sleeper's wake and end its context
// while it still sleeps, the one order in which cancellation and the wake
// coincide. Each Sleep sends its deadline on wakes.
type deafClock struct {
	*buckettest.FakeClock
	wakes chan int64
}

func (c *deafClock) Sleep(ctx context.Context, d time.Duration) error {
	c.wakes <- c.Now() + int64(d)
	<-ctx.Done()
	return ctx.Err()
}

// cancelAtWake cancels a waiter whose clock has reached its wake exactly
// before its sleep ended: its tokens came due, so it has them and AcquireN
// returns nil (rule 9), and they stay taken. The limit's one waiter is
// queued on a drained limiter, for one and for two of the limit.
func (s suite) cancelAtWake(t *testing.T) {
	for _, limit := range []int64{1, 2} {
		t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) {
			clk := &deafClock{FakeClock: buckettest.NewFakeClock(start), wakes: make(chan int64, 16)}
			l, err := s.a.New(limit, time.Second, admit.WithClock(clk))
			require.NoError(t, err)
			drain(l)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- l.AcquireN(ctx, limit) }()
			var wake int64
			select {
			case wake = <-clk.wakes:
			case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
				t.Fatal("the waiter never slept")
			}
			clk.Set(wake)
			cancel()
			assert.NoError(t, <-done, "cancelled at its wake: the tokens had come due")
			assert.False(t, l.TryAcquire(), "the waiter holds what came due at its wake")
		})
	}
}
