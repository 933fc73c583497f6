package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// TestBoundUnderConcurrency: the bound under concurrency, on a fake clock that a driver goroutine
// moves: an admission never takes InFlight above Limit, and InFlight is
// above Limit only after a decrease, by no more than the permits out at
// that decrease (less those ended since). A monitor checks it under the
// mutex, with the bound the update hook records under the same mutex, and
// that the lock-free mirrors (Limit, InFlight) agree with the state.
// Workers take permits at every priority, through a backlog, with
// contexts cancelled at random (grants racing cancellation), and end each
// permit twice, concurrently.
func TestBoundUnderConcurrency(t *testing.T) {
	for _, backlog := range []int{0, 4} {
		t.Run(fmt.Sprint("backlog=", backlog), func(t *testing.T) {
			clk := buckettest.NewFakeClock(1e9)
			opts := []Option{WithClock(clk), WithInitialLimit(8), WithLimitBounds(1, 32), WithMinSamples(5)}
			if backlog > 0 {
				opts = append(opts, WithBacklog(backlog, 20*time.Millisecond))
			}
			l, err := New(opts...)
			require.NoError(t, err)
			var violation atomic.Value
			lw := watchLimit(l)
			check := func() {
				l.mu.Lock()
				defer l.mu.Unlock()
				switch {
				case l.inflight < 0:
					violation.Store("in flight negative")
				case l.inflight > max(l.limit, lw.excess):
					violation.Store(fmt.Sprintf("in flight %d above limit %d and the %d out at the last decrease", l.inflight, l.limit, lw.excess))
				case l.inflightA.Load() != int64(l.inflight):
					violation.Store(fmt.Sprintf("InFlight() %d, state %d", l.inflightA.Load(), l.inflight))
				case l.limitA.Load() != int64(l.limit):
					violation.Store(fmt.Sprintf("Limit() %d, state %d", l.limitA.Load(), l.limit))
				}
				lw.settle()
			}
			var stop atomic.Bool
			var bg sync.WaitGroup
			bg.Add(2)
			go func() { // monitor
				defer bg.Done()
				for !stop.Load() {
					check()
				}
			}()
			go func() { // clock driver
				defer bg.Done()
				rng := rand.New(rand.NewPCG(1, 2))
				for !stop.Load() {
					clk.Advance(time.Duration(rng.IntN(int(3 * time.Millisecond))))
					time.Sleep(20 * time.Microsecond)
				}
			}()
			const workers, rounds = 8, 1500
			var wg sync.WaitGroup
			for g := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					for range rounds {
						ctx, cancel := context.WithCancel(ContextWithPriority(context.Background(), Priority(rng.IntN(5)-2)))
						if rng.IntN(5) == 0 {
							go cancel()
						}
						p, err := l.Acquire(ctx)
						cancel()
						if err != nil {
							if !errors.Is(err, admit.ErrOverloaded) && !errors.Is(err, context.Canceled) {
								violation.Store("Acquire: " + err.Error())
							}
							continue
						}
						if rng.IntN(2) == 0 {
							time.Sleep(time.Duration(rng.IntN(100)) * time.Microsecond)
						}
						end := func() func() {
							switch rng.IntN(40) {
							case 0:
								return p.Dropped
							case 1:
								return p.Ignore
							}
							return p.Success
						}
						a, b := end(), end()
						var both sync.WaitGroup
						both.Add(1)
						go func() { defer both.Done(); a() }()
						b()
						both.Wait()
					}
				}()
			}
			wg.Wait()
			stop.Store(true)
			bg.Wait()
			check()
			if v := violation.Load(); v != nil {
				t.Fatal(v)
			}
			s := l.Stats()
			require.Zero(t, s.InFlight)
			require.Zero(t, s.Waiting)
			require.Equal(t, s.Admitted+s.Waited, s.Successes+s.Drops+s.Ignored, "each permit ended once")
			require.Greater(t, s.Updates, uint64(10))
			require.NotZero(t, lw.decreases, "the limit was cut")
			require.NotZero(t, lw.increases, "the limit was raised")
			t.Logf("%+v, %d decreases, %d increases", s, lw.decreases, lw.increases)
		})
	}
}

// limitWatch follows a limiter's limit through testHookUpdate: the
// decreases and increases so far, and excess, the permits out at the last
// decrease, which the bound lets stand above the limit until in flight
// falls below it. Its fields require l.mu.
type limitWatch struct {
	l                                  *Limiter
	prev, excess, decreases, increases int
}

func watchLimit(l *Limiter) *limitWatch {
	w := &limitWatch{l: l, prev: l.limit}
	l.testHookUpdate = func(_ int64, limit int) {
		if limit < w.prev {
			w.decreases++
			w.excess = max(w.excess, l.inflight)
		} else if limit > w.prev {
			w.increases++
		}
		w.prev = limit
	}
	return w
}

// settle forgets the excess once in flight is below the limit, and
// otherwise lowers it to what is in flight: permits ended since the
// decrease are not granted again above the limit. Requires l.mu.
func (w *limitWatch) settle() {
	if w.l.inflight < w.l.limit {
		w.excess = 0
	} else {
		w.excess = min(w.excess, w.l.inflight)
	}
}
