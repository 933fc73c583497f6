package buckettest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mixedStorm mixes multi-token TryAcquireN with deadline-bounded AcquireN on
// the real clock, at a rate where a token comes every microsecond and the
// deadlines (50 to 200 µs) end many waits early: reservations, their undos
// and non-blocking takes of up to 12 tokens all race on the same state. On
// a sharded bucket of many shards (shardedbucket runs the suite with 16),
// takes of several tokens gather from several shards and lose races, some
// while an AcquireN is taking what the shards hold: the interleaving that
// once hung shardedbucket for good. A hang fails the test with every
// goroutine's stack (see Watchdog) instead of blocking the suite, and the
// bucket must still admit a full burst afterwards, once its refill has
// repaid any forfeited reservation.
func (s suite) mixedStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("real-clock storm")
	}
	const capacity, rate = 64, 1e6
	const storm = 200 * time.Millisecond
	l, err := s.make(capacity, rate)
	require.NoError(t, err)
	var stop atomic.Bool
	var admitted atomic.Int64
	var wg, started sync.WaitGroup
	begin := time.Now()
	started.Add(8)
	for g := range 4 {
		wg.Go(func() { // TryAcquireN(1..12)
			for k, first := g, true; first || !stop.Load(); k, first = k+1, false {
				if n := 1 + int64(k%12); l.TryAcquireN(n) {
					admitted.Add(n)
				}
				if first {
					started.Done()
				}
			}
		})
		wg.Go(func() { // AcquireN(2..31), deadlines of 50 to 200 µs
			for k, first := g, true; first || !stop.Load(); k, first = k+1, false {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+k%4)*50*time.Microsecond)
				if n := 2 + int64(k%30); l.AcquireN(ctx, n) == nil {
					admitted.Add(n)
				}
				cancel()
				if first {
					started.Done()
				}
			}
		})
	}
	defer stop.Store(true) // also when a hang fails the test: the others stop
	// A hang can come before every goroutine has made its first call.
	Watchdog(t, HangAfter, "the mixed storm's first calls", started.Wait)
	time.Sleep(storm) // how long to storm, not an assertion
	stop.Store(true)
	Watchdog(t, HangAfter, "the mixed storm's goroutines to return", wg.Wait)
	elapsed := time.Since(begin)
	assert.LessOrEqual(t, float64(admitted.Load()), capacity+rate*elapsed.Seconds()+1, "admitted over %v", elapsed)
	var after error
	Watchdog(t, HangAfter, "AcquireN after the storm", func() { after = l.AcquireN(context.Background(), capacity) })
	assert.NoError(t, after, "a full burst after the storm")
}
