package adaptive

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// A waiter whose context ends as a permit is handed to it returns
// ctx.Err(), as golang.org/x/sync/semaphore does, and the permit goes to
// the next waiter: the grant is forced to land between the context's end
// and the waiter's return by holding the limiter's mutex across both.
func TestGrantAfterContextEnded(t *testing.T) {
	bg := context.Background()
	clk := buckettest.NewFakeClock(1e9)
	l, err := New(WithClock(clk), WithInitialLimit(1), WithLimitBounds(1, 1), WithBacklog(2, time.Second))
	require.NoError(t, err)
	held, err := l.Acquire(bg)
	require.NoError(t, err)

	type result struct {
		p   *Permit
		err error
	}
	ctxA, cancelA := context.WithCancel(bg)
	a, b := make(chan result, 1), make(chan result, 1)
	go func() { p, err := l.Acquire(ctxA); a <- result{p, err} }()
	require.NoError(t, clk.WaitForSleepers(bg, 1))
	go func() { p, err := l.Acquire(bg); b <- result{p, err} }()
	require.NoError(t, clk.WaitForSleepers(bg, 2))

	l.mu.Lock()
	cancelA()
	// What held.Success() does, under the same hold of mu: the head of
	// the backlog, A, is granted the permit although its context ended.
	require.True(t, held.ended.CompareAndSwap(false, true))
	l.endLocked(held, success, clk.Now())
	require.Equal(t, 1, l.nwait, "A left the backlog with the permit; B waits")
	require.Equal(t, 1, l.inflight)
	// Waited counts a permit when its waiter takes it, not when it is
	// handed over: A gives this one back, and a count a scrape has seen
	// (admitotel exports it as a counter) must never go down.
	require.Zero(t, l.stats.Waited)
	l.mu.Unlock()

	ra := <-a
	require.ErrorIs(t, ra.err, context.Canceled)
	require.Nil(t, ra.p)
	rb := <-b
	require.NoError(t, rb.err, "the permit A gave back went to B")
	require.Equal(t, 1, l.InFlight())
	rb.p.Success()
	require.Zero(t, l.InFlight())
	s := l.Stats()
	require.Equal(t, uint64(1), s.Admitted)
	require.Equal(t, uint64(1), s.Waited, "B only")
	require.Equal(t, uint64(1), s.Cancelled)
	require.Equal(t, s.Admitted+s.Waited, s.Successes+s.Drops+s.Ignored)
}

// Many goroutines on the real clock take permits at every priority, with a
// backlog, contexts that end while they wait, a limit that moves (windows
// of three outcomes), and two ends racing on each permit, while a monitor
// checks the backlog's invariants under the mutex, over and over: the
// in-flight count never negative, no caller waiting while a permit is
// free, the backlog within its bound, and its count equal to the waiters
// linked in its queues. At the end the counters add up and nothing is
// left in flight or waiting.
func TestBacklogInvariants(t *testing.T) {
	const goroutines, rounds = 16, 1000
	l, err := New(WithInitialLimit(4), WithLimitBounds(1, 16), WithBacklog(6, 2*time.Millisecond), WithMinSamples(3))
	require.NoError(t, err)
	var stop atomic.Bool
	var violation atomic.Value
	monitor := make(chan struct{})
	go func() {
		defer close(monitor)
		for !stop.Load() {
			l.mu.Lock()
			linked := 0
			for i := range l.queues {
				for w := l.queues[i].head; w != nil; w = w.next {
					linked++
				}
			}
			switch {
			case l.inflight < 0:
				violation.Store("in flight negative")
			case l.nwait > 0 && l.inflight < l.limit:
				violation.Store("a caller waits while a permit is free")
			case l.nwait > l.cfg.backlog:
				violation.Store("backlog above its bound")
			case linked != l.nwait:
				violation.Store("waiters linked differ from the count")
			}
			l.mu.Unlock()
		}
	}()
	var ended atomic.Uint64 // contexts that had ended before Acquire
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range rounds {
				ctx := ContextWithPriority(context.Background(), Priority(rng.IntN(5)-2))
				cancel := context.CancelFunc(func() {})
				if rng.IntN(4) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(2000))*time.Microsecond)
				}
				if ctx.Err() != nil {
					ended.Add(1)
				}
				p, err := l.Acquire(ctx)
				cancel()
				if err != nil {
					if !errors.Is(err, admit.ErrOverloaded) && !errors.Is(err, context.DeadlineExceeded) {
						violation.Store("Acquire: " + err.Error())
					}
					continue
				}
				if rng.IntN(3) != 0 {
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				}
				var both sync.WaitGroup
				both.Add(2)
				go func() { defer both.Done(); p.Success() }()
				go func() {
					defer both.Done()
					if g%4 == 0 {
						p.Dropped()
					} else {
						p.Ignore()
					}
				}()
				both.Wait()
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	<-monitor
	if v := violation.Load(); v != nil {
		t.Fatal(v)
	}
	s := l.Stats()
	require.Zero(t, s.InFlight)
	require.Zero(t, s.Waiting)
	require.Equal(t, s.Admitted+s.Waited, s.Successes+s.Drops+s.Ignored)
	require.Equal(t, uint64(goroutines*rounds), s.Admitted+s.Waited+s.Shed+s.Cancelled+ended.Load())
	require.NotZero(t, s.Waited, "the backlog was used")
	require.NotZero(t, s.Cancelled, "contexts ended in it")
	require.Greater(t, s.Updates, uint64(10), "the limit was updated")
}

// TestLimiterSize holds the package doc's "about 4.4 KiB" (4520 bytes on
// 64-bit platforms): a change that grows the Limiter past it must say so.
func TestLimiterSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the documented size is for 64-bit platforms")
	}
	if got := unsafe.Sizeof(Limiter{}); got < 4300 || got > 4600 {
		t.Errorf("a Limiter is %d bytes; the package doc says about 4.4 KiB (4520)", got)
	}
}
