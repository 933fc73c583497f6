// Package windowtest is the conformance suite the windowed limiters
// (fixedwindow, slidinglog, slidingwindow) and the leaky bucket pass,
// shaped like buckettest: each algorithm runs it with its own declared
// bound, the most it may admit in any span of a given length.
//
// A package calls it from one test and one fuzz target:
//
//	var alg = windowtest.Algorithm{New: ..., Bound: ...}
//	func TestConformance(t *testing.T) { windowtest.Run(t, alg) }
//	func FuzzModel(f *testing.F)       { windowtest.Fuzz(f, alg) }
//
// Deterministic cases run on buckettest.FakeClock with explicit steps; the
// storms run on the real clock and check the bound over the whole run; the
// fuzz target interleaves TryAcquireN, blocking AcquireN, cancellations and
// clock steps on the fake clock, records every admission (a waiter that
// returns nil included) at its fake time, and checks the declared bound on
// every window of several lengths.
package windowtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// Algorithm describes the limiter under test in the suite's terms: a limit
// per window.
type Algorithm struct {
	// New returns a fresh limiter for a nominal limit per window. The
	// counting limiters take them as they are; the leaky bucket takes limit
	// as its capacity and limit/window as its rate.
	New func(limit int64, window time.Duration, opts ...admit.Option) (admit.Limiter, error)
	// Bound returns the most the limiter may admit in any half-open span of
	// length span, when no request asks for more than maxN.
	Bound func(limit int64, window, span time.Duration, maxN int64) int64
	// Invalid lists configurations New must reject beyond the suite's own
	// (limit < 1, window <= 0, a nil clock, a nil option), each with a
	// substring the error must contain.
	Invalid []Invalid
	// RateBased is set for limiters configured by a rate rather than a
	// window (leakybucket): the suite's invalid-window cases do not apply
	// (the adapter turns them into rates), and the package tests its own
	// rate validation.
	RateBased bool
	// MovesUp is set for a limiter with a queue (leakybucket): a waiter that
	// is cancelled leaves it and the waiters behind it move up, where the
	// others forfeit a cancelled reservation below the tail.
	MovesUp bool
	// Aligned is set for a limiter that admits at most limit in each
	// aligned window [k·window, (k+1)·window) of elapsed time since New
	// (fixedwindow, slidingwindow): the fuzz target checks that too.
	Aligned bool
}

// Invalid is one configuration New must reject with admit.ErrInvalidConfig.
type Invalid struct {
	Limit   int64
	Window  time.Duration
	Mention string
}

// start is an arbitrary non-zero origin for the fake clocks.
const start = int64(1) << 40

// Run runs the suite.
func Run(t *testing.T, a Algorithm) {
	s := suite{a}
	t.Run("InvalidConfig", s.invalidConfig)
	t.Run("TryAcquireNEdges", s.tryAcquireNEdges)
	t.Run("Burst", s.burst)
	t.Run("WaitMatchesTry", s.waitMatchesTry)
	t.Run("DeadlineTooEarly", s.deadlineTooEarly)
	t.Run("Unsatisfiable", s.unsatisfiable)
	t.Run("Cancel", s.cancel)
	t.Run("CancelBelowTail", s.cancelBelowTail)
	t.Run("CancelAtWake", s.cancelAtWake)
	t.Run("Waiters", s.waiters)
	t.Run("BackwardClock", s.backwardClock)
	t.Run("WakeNotEarly", s.wakeNotEarly)
	t.Run("Allocs", s.allocs)
	t.Run("Storm", s.storm)
	t.Run("BlockingStorm", s.blockingStorm)
	t.Run("NoGoroutines", s.noGoroutines)
}

type suite struct{ a Algorithm }

func (s suite) fake(t testing.TB, limit int64, window time.Duration) (admit.Limiter, *buckettest.FakeClock) {
	t.Helper()
	clk := buckettest.NewFakeClock(start)
	l, err := s.a.New(limit, window, admit.WithClock(clk))
	require.NoError(t, err, "New(%d, %v)", limit, window)
	return l, clk
}

func drain(l admit.Limiter) int64 {
	var n int64
	for l.TryAcquire() {
		n++
	}
	return n
}

func (s suite) invalidConfig(t *testing.T) {
	cases := []Invalid{
		{0, time.Second, "0"},
		{-1, time.Second, "-1"},
		{math.MinInt64, time.Second, strconv.FormatInt(math.MinInt64, 10)},
	}
	if !s.a.RateBased {
		cases = append(cases, Invalid{1, 0, "0s"}, Invalid{1, -time.Nanosecond, "-1ns"})
	}
	cases = append(cases, s.a.Invalid...)
	for _, tc := range cases {
		t.Run(fmt.Sprintf("limit=%d/window=%v", tc.Limit, tc.Window), func(t *testing.T) {
			_, err := s.a.New(tc.Limit, tc.Window)
			require.ErrorIs(t, err, admit.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.Mention, "the error names the bad value")
		})
	}
	for name, opt := range map[string]admit.Option{"WithClock(nil)": admit.WithClock(nil), "nil": nil} {
		_, err := s.a.New(1, time.Second, opt)
		require.ErrorIs(t, err, admit.ErrInvalidConfig, name)
		assert.Contains(t, err.Error(), name)
	}
	for _, limit := range []int64{1, 2, 1000} {
		for _, w := range []time.Duration{time.Millisecond, time.Second, time.Hour} {
			_, err := s.a.New(limit, w)
			require.NoError(t, err, "New(%d, %v) must be accepted", limit, w)
		}
	}
}

func (s suite) tryAcquireNEdges(t *testing.T) {
	l, _ := s.fake(t, 5, time.Second)
	before := l.Tokens()
	assert.True(t, l.TryAcquireN(0), "n=0 is always true")
	assert.Equal(t, before, l.Tokens(), "n=0 consumes nothing")
	for _, n := range []int64{-1, math.MinInt64, 6, math.MaxInt64} {
		assert.False(t, l.TryAcquireN(n), "TryAcquireN(%d)", n)
	}
	assert.Equal(t, before, l.Tokens(), "rejected requests consume nothing")
	drain(l)
	assert.True(t, l.TryAcquireN(0), "n=0 is true on a drained limiter too")
}

// burst: a fresh limiter admits at least one at once, and no more at one
// instant than its bound for the shortest span.
func (s suite) burst(t *testing.T) {
	for _, limit := range []int64{1, 3, 100} {
		l, _ := s.fake(t, limit, time.Second)
		got := drain(l)
		assert.GreaterOrEqual(t, got, int64(1), "limit=%d", limit)
		assert.LessOrEqual(t, got, s.a.Bound(limit, time.Second, 1, 1), "limit=%d", limit)
		assert.False(t, l.TryAcquire())
	}
}

// waitFor blocks until clk has n sleepers (a hang guard, not a timing
// assertion).
func waitFor(t testing.TB, clk *buckettest.FakeClock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, clk.WaitForSleepers(ctx, n), "waiting for %d sleepers (have %d)", n, clk.Sleepers())
}

// waitMatchesTry: a blocked AcquireN wakes exactly when TryAcquireN would
// first admit on an identical limiter driven by the same steps: not a
// nanosecond early, not late.
func (s suite) waitMatchesTry(t *testing.T) {
	const w = time.Second
	for _, tc := range []struct {
		limit, n int64
		pre      []time.Duration // steps, each followed by a drain
	}{
		{1, 1, nil},
		{5, 1, nil},
		{5, 3, nil},
		{5, 5, []time.Duration{300 * time.Millisecond}},
		{10, 4, []time.Duration{100 * time.Millisecond, 450 * time.Millisecond, 999 * time.Millisecond}},
		{3, 2, []time.Duration{w - 1, 1, w / 2}},
	} {
		t.Run(fmt.Sprintf("limit=%d/n=%d/steps=%d", tc.limit, tc.n, len(tc.pre)), func(t *testing.T) {
			a, ca := s.fake(t, tc.limit, w)
			b, cb := s.fake(t, tc.limit, w)
			drain(a)
			drain(b)
			for _, d := range tc.pre {
				ca.Advance(d)
				cb.Advance(d)
				require.Equal(t, drain(a), drain(b), "twins decide alike")
			}
			done := make(chan error, 1)
			go func() { done <- a.AcquireN(context.Background(), tc.n) }()
			waitFor(t, ca, 1)
			wake, ok := ca.NextWake()
			require.True(t, ok)
			require.Greater(t, wake, cb.Now())
			cb.Set(wake - 1)
			assert.False(t, b.TryAcquireN(tc.n), "one nanosecond before the wake, TryAcquireN(%d) rejects", tc.n)
			cb.Set(wake)
			assert.True(t, b.TryAcquireN(tc.n), "at the wake, TryAcquireN(%d) admits", tc.n)
			ca.Set(wake)
			require.NoError(t, <-done)
			assert.Equal(t, b.Tokens(), a.Tokens(), "the waiter consumed what TryAcquireN did")
			for _, d := range []time.Duration{0, w / 3, w, 2 * w} {
				ca.Advance(d)
				cb.Advance(d)
				assert.Equal(t, drain(b), drain(a), "and left the limiter as TryAcquireN did")
			}
		})
	}
}

func (s suite) deadlineTooEarly(t *testing.T) {
	l, clk := s.fake(t, 2, time.Hour)
	drain(l)
	before := l.Tokens()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := l.AcquireN(ctx, 1)
	require.ErrorIs(t, err, admit.ErrDeadline)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 0, clk.Sleepers(), "returned at once, without sleeping")
	assert.Equal(t, before, l.Tokens(), "consumed nothing")
	// Nothing was reserved: a waiter without a deadline wakes exactly when
	// a fresh twin's would.
	twin, ct := s.fake(t, 2, time.Hour)
	drain(twin)
	for _, p := range []struct {
		l admit.Limiter
		c *buckettest.FakeClock
	}{{l, clk}, {twin, ct}} {
		go func() { _ = p.l.Acquire(context.Background()) }()
		waitFor(t, p.c, 1)
	}
	w1, _ := clk.NextWake()
	w2, _ := ct.NextWake()
	assert.Equal(t, w2, w1, "the rejected request left no reservation behind")
	clk.Set(w1)
	ct.Set(w2)
	waitFor(t, clk, 0)
	waitFor(t, ct, 0)
}

func (s suite) unsatisfiable(t *testing.T) {
	l, clk := s.fake(t, 5, time.Second)
	ctx := context.Background()
	for _, n := range []int64{6, math.MaxInt64, -1} {
		err := l.AcquireN(ctx, n)
		require.ErrorIs(t, err, admit.ErrUnsatisfiable, "AcquireN(%d)", n)
		assert.Contains(t, err.Error(), strconv.FormatInt(n, 10))
	}
	before := l.Tokens()
	assert.NoError(t, l.AcquireN(ctx, 0))
	assert.Equal(t, before, l.Tokens())
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	assert.Equal(t, context.Canceled, l.AcquireN(canceled, 1), "a done context admits nothing")
	assert.Equal(t, before, l.Tokens())
	assert.Equal(t, 0, clk.Sleepers())
}

// cancel: a cancelled waiter that is the last one queued gives its place
// back: at its wake, a TryAcquire takes it.
func (s suite) cancel(t *testing.T) {
	l, clk := s.fake(t, 2, time.Second)
	drain(l)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Acquire(ctx) }()
	waitFor(t, clk, 1)
	wake, _ := clk.NextWake()
	cancel()
	assert.Equal(t, context.Canceled, <-done, "ctx.Err() returned unchanged")
	assert.Equal(t, 0, clk.Sleepers())
	clk.Set(wake)
	assert.True(t, l.TryAcquire(), "the cancelled waiter's place went to someone else")
}

// cancelBelowTail: a cancelled waiter with a later waiter queued behind it
// is forfeited, not given back (the tail rule): the later waiter keeps its
// wake and is admitted at it, and from then on the limiter decides exactly
// like a twin whose two waiters were both admitted. With MovesUp, the later
// waiter moves up to the cancelled one's wake instead, and the limiter
// decides like a twin that only ever admitted one of them.
func (s suite) cancelBelowTail(t *testing.T) {
	mk := func() (admit.Limiter, *recordingClock) {
		clk := newRecordingClock()
		l, err := s.a.New(2, time.Second, admit.WithClock(clk))
		require.NoError(t, err)
		return l, clk
	}
	l, clk := mk()
	twin, ct := mk()
	require.Equal(t, drain(twin), drain(l))
	type waiter struct {
		cancel context.CancelFunc
		done   chan error
	}
	queue := func(l admit.Limiter, c *recordingClock, k int) waiter {
		ctx, cancel := context.WithCancel(context.Background())
		w := waiter{cancel, make(chan error, 1)}
		go func() { w.done <- l.Acquire(ctx) }()
		_, returned := sleepOrReturn(t, c.FakeClock, k, w.done)
		require.False(t, returned, "waiter %d must wait", k)
		return w
	}
	first, second := queue(l, clk, 1), queue(l, clk, 2)
	tfirst, tsecond := queue(twin, ct, 1), queue(twin, ct, 2)
	require.Equal(t, ct.wakes, clk.wakes, "twins queue alike")
	first.cancel()
	assert.Equal(t, context.Canceled, <-first.done)
	if s.a.MovesUp {
		clk.waitSleeps(t, 3) // the later waiter's sleep, interrupted and taken again
	}
	waitFor(t, clk.FakeClock, 1)
	w, _ := clk.NextWake()
	if s.a.MovesUp {
		// The queue: the later waiter takes the cancelled one's place, and
		// the limiter then decides like a twin whose later waiter left.
		assert.Equal(t, clk.wakes[0], w, "the later waiter moves up into the cancelled one's place")
		tsecond.cancel()
		assert.Equal(t, context.Canceled, <-tsecond.done)
		ct.Set(ct.wakes[0])
		require.NoError(t, <-tfirst.done)
		clk.Set(w)
		require.NoError(t, <-second.done, "admitted at its new wake")
		for _, d := range []time.Duration{0, time.Second / 3, time.Second, 2 * time.Second} {
			clk.Advance(d)
			ct.Advance(d)
			assert.Equal(t, drain(twin), drain(l), "as if only one waiter had queued")
		}
		return
	}
	assert.Equal(t, clk.wakes[1], w, "the later waiter keeps its wake")
	for i, d := range []chan error{tfirst.done, tsecond.done} {
		ct.Set(ct.wakes[i])
		require.NoError(t, <-d)
	}
	clk.Set(clk.wakes[1])
	require.NoError(t, <-second.done, "admitted at its wake")
	for _, d := range []time.Duration{0, time.Second / 3, time.Second, 2 * time.Second} {
		clk.Advance(d)
		ct.Advance(d)
		assert.Equal(t, drain(twin), drain(l), "the cancelled reservation was forfeited, as if admitted")
	}
}

// recordingClock records the deadline of every Sleep, in call order.
type recordingClock struct {
	*buckettest.FakeClock
	mu    sync.Mutex
	wakes []int64       // requires mu
	slept chan struct{} // one send per Sleep, before the sleeper is registered
	seen  int           // sends received by waitSleeps; the test's goroutine only
}

func newRecordingClock() *recordingClock {
	// The buffer outlasts any test's Sleeps: none makes a thousand.
	return &recordingClock{FakeClock: buckettest.NewFakeClock(start), slept: make(chan struct{}, 1<<12)}
}

func (c *recordingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.wakes = append(c.wakes, c.Now()+int64(d))
	c.mu.Unlock()
	c.slept <- struct{}{}
	return c.FakeClock.Sleep(ctx, d)
}

// waitSleeps blocks until n Sleeps have begun (a hang guard, not a timing
// assertion).
func (c *recordingClock) waitSleeps(t testing.TB, n int) {
	t.Helper()
	hang := time.After(30 * time.Second)
	for ; c.seen < n; c.seen++ {
		select {
		case <-c.slept:
		case <-hang:
			t.Fatalf("waiting for %d sleeps", n)
		}
	}
}

// waiters queues 12 blocked Acquires one after another and moves the clock
// to each next wake: wakes never decrease in arrival order, waiters are
// admitted in arrival order, and TryAcquire never overtakes a sleeper.
func (s suite) waiters(t *testing.T) {
	const n = 12
	clk := newRecordingClock()
	l, err := s.a.New(3, time.Second, admit.WithClock(clk))
	require.NoError(t, err)
	drain(l)
	admitted := make(chan int, n)
	park, unpark := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { unpark(); wg.Wait() }() // on failure, release the sleepers
	queued := 0
	for i := range n {
		done := make(chan error, 1)
		wg.Go(func() {
			err := l.Acquire(park)
			done <- err
			if err == nil {
				admitted <- i
			}
		})
		if err, returned := sleepOrReturn(t, clk.FakeClock, i+1, done); returned {
			// Only a bounded queue may refuse a waiter, and only once full.
			require.ErrorIs(t, err, admit.ErrQueueFull, "waiter %d", i)
			break
		}
		queued++
	}
	require.GreaterOrEqual(t, queued, 3, "at least the limit's worth of waiters queue")
	clk.mu.Lock()
	wakes := slices.Clone(clk.wakes)
	clk.mu.Unlock()
	require.Len(t, wakes, queued)
	assert.True(t, slices.IsSorted(wakes), "wakes in arrival order: %v", wakes)
	next := 0
	for clk.Sleepers() > 0 {
		assert.False(t, l.TryAcquire(), "a waiter is still queued")
		wake, _ := clk.NextWake()
		before := clk.Sleepers()
		clk.Set(wake)
		woken := before - clk.Sleepers()
		require.Positive(t, woken)
		var got []int
		for range woken {
			got = append(got, <-admitted)
		}
		slices.Sort(got)
		want := make([]int, woken)
		for k := range want {
			want[k] = next + k
		}
		require.Equal(t, want, got, "woken at %d: the next waiters in arrival order", wake-start)
		next += woken
	}
	assert.Equal(t, queued, next)
}

// sleepOrReturn waits until clk has sleepers sleepers or done delivers the
// result of a call that returned without sleeping.
func sleepOrReturn(t testing.TB, clk *buckettest.FakeClock, sleepers int, done chan error) (err error, returned bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slept := make(chan error, 1)
	go func() { slept <- clk.WaitForSleepers(ctx, sleepers) }()
	select {
	case err := <-done:
		cancel()
		<-slept
		return err, true
	case err := <-slept:
		require.NoError(t, err, "neither returned nor slept")
		return nil, false
	}
}

func (s suite) backwardClock(t *testing.T) {
	// A stale reading admits nothing and leaves nothing behind: after a
	// drain at 10 s, a reading at 5 s admits nothing, and from then on the
	// limiter decides exactly like a twin that never saw the stale reading.
	const w = time.Second
	l, clk := s.fake(t, 3, w)
	twin, ct := s.fake(t, 3, w)
	clk.Advance(10 * time.Second)
	ct.Advance(10 * time.Second)
	require.Equal(t, drain(twin), drain(l))
	clk.Advance(-5 * time.Second)
	assert.False(t, l.TryAcquire(), "a reading from the past admits nothing")
	clk.Advance(5 * time.Second)
	for _, d := range []time.Duration{w / 2, w / 3, w, 3 * w / 2, 1} {
		clk.Advance(d)
		ct.Advance(d)
		assert.Equal(t, drain(twin), drain(l), "after the stale reading, as a twin that never saw it")
	}
	l2, clk2 := s.fake(t, 1, w)
	clk2.Set(math.MinInt64)
	assert.True(t, l2.TryAcquire())
	clk2.Set(math.MaxInt64)
	assert.True(t, l2.TryAcquire(), "a far-future reading is much later")
	clk2.Set(start)
	assert.False(t, l2.TryAcquire())
}

// wakeNotEarly: a waiter never returns before its reservation's instant on
// the limiter's clock, whatever reading its wait was measured from: one
// behind the limiter's latest (what a goroutine that read the clock and then
// lost the race applies) or one before the limiter's creation. The instant
// is where a twin that saw the same readings, less the stale one, first
// admits; the limiter's clock at the return is the latest of its readings.
// The clock is stepped to each sleeper's deadline in turn, so an early
// return is seen at the reading it happened.
func (s suite) wakeNotEarly(t *testing.T) {
	const w = int64(time.Second)
	for _, tc := range []struct {
		name          string
		latest, stale int64 // readings after the drain, from the start
	}{
		{"before creation", 0, -w / 4},
		{"behind the latest", 4 * w / 10, 2 * w / 10},
		{"latest, then before creation", 4 * w / 10, -3 * w},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, clk := s.fake(t, 2, time.Duration(w))
			twin, ct := s.fake(t, 2, time.Duration(w))
			require.Equal(t, drain(twin), drain(l))
			clk.Set(start + tc.latest)
			ct.Set(start + tc.latest)
			l.Tokens()
			twin.Tokens()
			instant := ct.Now()
			tdone := make(chan error, 1)
			go func() { tdone <- twin.Acquire(context.Background()) }()
			if err, returned := sleepOrReturn(t, ct, 1, tdone); returned {
				require.NoError(t, err)
			} else {
				instant, _ = ct.NextWake()
				ct.Set(instant)
				require.NoError(t, <-tdone)
			}
			clk.Set(start + tc.stale)
			done := make(chan error, 1)
			go func() { done <- l.Acquire(context.Background()) }()
			_, returned := sleepOrReturn(t, clk, 1, done)
			require.False(t, returned, "a reading older than the latest admits nothing at once")
			for {
				wake, ok := clk.NextWake()
				require.True(t, ok)
				clk.Set(wake)
				if err, returned := sleepOrReturn(t, clk, 1, done); returned {
					require.NoError(t, err)
					at := max(wake, start+tc.latest)
					require.GreaterOrEqual(t, at-start, instant-start, "returned at %v, before its reservation's instant", time.Duration(at-start))
					assert.Equal(t, instant-start, at-start, "and not later either")
					break
				}
			}
		})
	}
}

func (s suite) allocs(t *testing.T) {
	l, err := s.a.New(1e6, time.Millisecond)
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { l.TryAcquire() }), "admit")
	e, _ := s.fake(t, 1, time.Hour)
	drain(e)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { e.TryAcquire() }), "reject")
}

// storm hammers a limiter on the real clock; the limiter's elapsed time
// runs from before New to after the last goroutine stops, so everything it
// admitted falls in a span of that length.
func (s suite) storm(t *testing.T) {
	if testing.Short() {
		t.Skip("real-clock storm")
	}
	for _, tc := range []struct {
		limit int64
		w     time.Duration
	}{{100, 5 * time.Millisecond}, {10, time.Millisecond}, {1000, time.Hour}} {
		for _, g := range []int{2, 8, 64} {
			t.Run(fmt.Sprintf("limit=%d/window=%v/goroutines=%d", tc.limit, tc.w, g), func(t *testing.T) {
				t.Parallel()
				begin := time.Now()
				l, err := s.a.New(tc.limit, tc.w)
				require.NoError(t, err)
				maxN := min(3, tc.limit)
				admitted, _ := buckettest.Storm(l, g, 20*time.Millisecond, func(i int) int64 { return 1 + int64(i)%maxN })
				elapsed := time.Since(begin)
				assert.LessOrEqual(t, admitted, s.a.Bound(tc.limit, tc.w, elapsed, maxN), "admitted over %v", elapsed)
				assert.Positive(t, admitted)
			})
		}
	}
}

// blockingStorm mixes blocking Acquires, some cancelled while they wait,
// with TryAcquires on the real clock.
func (s suite) blockingStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("real-clock storm")
	}
	const limit, w = 5, time.Millisecond
	begin := time.Now()
	l, err := s.a.New(limit, w)
	require.NoError(t, err)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 40 {
				n := 1 + int64(i%2)
				switch (g + i) % 4 {
				case 0:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+i*7)*time.Microsecond)
					err := l.AcquireN(ctx, n)
					if err == nil {
						admitted.Add(n)
					} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, admit.ErrQueueFull) {
						t.Errorf("AcquireN: %v", err)
					}
					cancel()
				case 1:
					if l.TryAcquire() {
						admitted.Add(1)
					}
				default:
					err := l.Acquire(context.Background())
					if err == nil {
						admitted.Add(1)
					} else if !errors.Is(err, admit.ErrQueueFull) {
						t.Errorf("Acquire: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	assert.LessOrEqual(t, admitted.Load(), s.a.Bound(limit, w, elapsed, 2), "admitted over %v", elapsed)
}

func (s suite) noGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l, clk := s.fake(t, 2, time.Second)
	drain(l)
	l.Tokens()
	done := make(chan error, 1)
	go func() { done <- l.Acquire(context.Background()) }()
	waitFor(t, clk, 1)
	wake, _ := clk.NextWake()
	clk.Set(wake)
	require.NoError(t, <-done)
	rl, err := s.a.New(1, time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, rl.Acquire(context.Background()))
	require.NoError(t, rl.Acquire(context.Background()), "a real-clock wait of about 1 ms")
}
