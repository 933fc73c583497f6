package buckettest

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hangAfter is how long a storm's goroutines may take to return once told to
// stop before the suite calls it a hang: every call in a storm returns
// within microseconds of its deadline, so only a deadlock comes near it. It
// guards against hanging the test binary; it is not a timing assertion.
const hangAfter = 30 * time.Second

// mixedStorm mixes multi-token TryAcquireN with deadline-bounded AcquireN on
// the real clock, at a rate where tokens come every microsecond and the
// deadlines (at most 200 µs) end most waits early: reservations, their
// undos, and non-blocking takes of up to 12 tokens all race on the same
// state. A sharded bucket run through Run with many shards (as shardedbucket
// does) has every TryAcquireN gather from several shards and lose races to
// the reservations, and every AcquireN find the shards holding enough just
// after a lost race: the interleaving that once hung shardedbucket for good.
// A hang fails the test with every goroutine's stack instead of blocking
// the suite; the bucket must also still admit a full burst afterwards.
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
	watchdog(t, started.Wait, "the mixed storm's first calls")
	time.Sleep(storm) // how long to storm, not an assertion
	stop.Store(true)
	watchdog(t, wg.Wait, "the mixed storm's goroutines to return")
	elapsed := time.Since(begin)
	assert.LessOrEqual(t, float64(admitted.Load()), capacity+rate*elapsed.Seconds()+1, "admitted over %v", elapsed)
	// Every reservation has come due or been undone or forfeited; the
	// bucket must still be usable, and its refill repays any forfeit.
	var after error
	watchdog(t, func() { after = l.AcquireN(context.Background(), capacity) }, "AcquireN after the storm")
	assert.NoError(t, after, "a full burst after the storm")
}

// watchdog runs wait on a new goroutine and returns when it does. If it has
// not returned within hangAfter, the test fails at once with every
// goroutine's stack, so that a deadlock is reported with its cause rather
// than hanging the test binary; the stuck goroutine is left behind.
func watchdog(t *testing.T, wait func(), what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait()
	}()
	timer := time.NewTimer(hangAfter)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("hang: waited %v for %s; goroutines:\n%s", hangAfter, what, buf)
	}
}
