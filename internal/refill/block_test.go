package refill_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/casbucket"
	"github.com/admit-go/admit/gcra"
	"github.com/admit-go/admit/mutexbucket"
	"github.com/admit-go/admit/shardedbucket"
)

// TestBlockBeforeCreation: the buckets' blocking path (refill.Block) on a
// clock read before the bucket's creation, which Now clamps to 0. The wait
// is measured from 0; the caller must still sleep until a reading reaches
// its reservation's instant, not for the wait from the earlier reading.
// The clock is stepped to each sleeper's deadline, so an early return is
// seen at the reading it happened.
func TestBlockBeforeCreation(t *testing.T) {
	const start = int64(1) << 40
	for name, mk := range map[string]func(admit.Clock) (admit.Limiter, error){
		"mutexbucket":   func(c admit.Clock) (admit.Limiter, error) { return mutexbucket.New(1, 1, admit.WithClock(c)) },
		"casbucket":     func(c admit.Clock) (admit.Limiter, error) { return casbucket.New(1, 1, admit.WithClock(c)) },
		"gcra":          func(c admit.Clock) (admit.Limiter, error) { return gcra.New(1, 1, admit.WithClock(c)) },
		"shardedbucket": func(c admit.Clock) (admit.Limiter, error) { return shardedbucket.New(1, 1, admit.WithClock(c)) },
	} {
		t.Run(name, func(t *testing.T) {
			clk := buckettest.NewFakeClock(start)
			b, err := mk(clk)
			require.NoError(t, err)
			require.True(t, b.TryAcquire(), "drained at creation: the next token is at 1 s")
			clk.Set(start - int64(62*time.Millisecond))
			done := make(chan error, 1)
			go func() { done <- b.Acquire(context.Background()) }()
			hang, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for {
				// Asleep (again), or returned: whichever comes first.
				slept := make(chan error, 1)
				go func() { slept <- clk.WaitForSleepers(hang, 1) }()
				select {
				case err := <-done:
					require.NoError(t, err)
					now := clk.Now()
					require.GreaterOrEqual(t, now-start, int64(time.Second), "returned at %v, before the token's instant", time.Duration(now-start))
					return
				case err := <-slept:
					require.NoError(t, err, "neither returned nor slept")
				}
				wake, _ := clk.NextWake()
				clk.Set(wake)
			}
		})
	}
}
