package adaptive_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/adaptive"
	"github.com/admit-go/admit/buckettest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewInvalid(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  adaptive.Option
		want string
	}{
		{"nil option", nil, "option 0 is nil"},
		{"nil clock", adaptive.WithClock(nil), "WithClock(nil)"},
		{"min 0", adaptive.WithLimitBounds(0, 10), "WithLimitBounds(0, 10)"},
		{"max < min", adaptive.WithLimitBounds(5, 4), "WithLimitBounds(5, 4)"},
		{"max too big", adaptive.WithLimitBounds(1, adaptive.MaxLimitBound+1), "WithLimitBounds(1, 1048577)"},
		{"initial 0", adaptive.WithInitialLimit(0), "WithInitialLimit(0)"},
		{"negative backlog", adaptive.WithBacklog(-1, time.Second), "WithBacklog(-1, 1s)"},
		{"backlog no wait", adaptive.WithBacklog(3, 0), "WithBacklog(3, 0)"},
		{"wait no backlog", adaptive.WithBacklog(0, time.Second), "WithBacklog(0, 1s)"},
		{"negative wait", adaptive.WithBacklog(3, -time.Second), "WithBacklog(3, -1s)"},
		{"zero algorithm", adaptive.WithAlgorithm(adaptive.Algorithm{}), "WithAlgorithm"},
		{"min samples 0", adaptive.WithMinSamples(0), "WithMinSamples(0)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := adaptive.New(c.opt)
			require.Nil(t, l)
			require.ErrorIs(t, err, admit.ErrInvalidConfig)
			require.Contains(t, err.Error(), c.want)
		})
	}
	_, err := adaptive.New(adaptive.WithLimitBounds(5, 10), adaptive.WithInitialLimit(20))
	require.ErrorIs(t, err, admit.ErrInvalidConfig)
	require.Contains(t, err.Error(), "WithInitialLimit(20) outside the bounds [5, 10]")
}

func TestDefaults(t *testing.T) {
	l, err := adaptive.New()
	require.NoError(t, err)
	require.Equal(t, adaptive.DefaultInitialLimit, l.Limit())
	require.Zero(t, l.InFlight())
	// The initial limit is clamped to the bounds when not given.
	l, err = adaptive.New(adaptive.WithLimitBounds(1, 5))
	require.NoError(t, err)
	require.Equal(t, 5, l.Limit())
}

func newFake(t *testing.T, opts ...adaptive.Option) (*adaptive.Limiter, *buckettest.FakeClock) {
	t.Helper()
	clk := buckettest.NewFakeClock(1e9)
	l, err := adaptive.New(append([]adaptive.Option{adaptive.WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	return l, clk
}

func TestPermitEndsOnce(t *testing.T) {
	l, _ := newFake(t, adaptive.WithInitialLimit(3))
	p1, err := l.Acquire(context.Background())
	require.NoError(t, err)
	p2, err := l.Acquire(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, l.InFlight())
	p1.Success()
	p1.Success()
	p1.Dropped()
	p1.Ignore()
	require.Equal(t, 1, l.InFlight(), "a second end is a no-op")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); p2.Dropped() }()
	}
	wg.Wait()
	require.Zero(t, l.InFlight(), "concurrent ends release once")
	s := l.Stats()
	require.Equal(t, uint64(1), s.Successes)
	require.Equal(t, uint64(1), s.Drops)
	require.Zero(t, s.Ignored)

	var nilPermit *adaptive.Permit
	nilPermit.Success()
	nilPermit.Dropped()
	nilPermit.Ignore()
	var zero adaptive.Permit
	zero.Success()
	require.Zero(t, l.InFlight())
}

func TestShedAtOnce(t *testing.T) {
	l, _ := newFake(t, adaptive.WithInitialLimit(2))
	ctx := context.Background()
	a, err := l.Acquire(ctx)
	require.NoError(t, err)
	_, err = l.Acquire(ctx)
	require.NoError(t, err)
	p, err := l.Acquire(ctx)
	require.Nil(t, p)
	require.ErrorIs(t, err, admit.ErrOverloaded)
	var oe *adaptive.OverloadedError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, adaptive.OverloadedError{Limit: 2, InFlight: 2, Priority: adaptive.Normal}, *oe)
	require.Contains(t, err.Error(), "limit 2 with 2 in flight")
	a.Success()
	_, err = l.Acquire(ctx)
	require.NoError(t, err, "a released permit is free again")
	require.Equal(t, uint64(1), l.Stats().Shed)
}

func TestContextEnded(t *testing.T) {
	l, _ := newFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, err := l.Acquire(ctx)
	require.Nil(t, p)
	require.Same(t, context.Canceled, err, "ctx.Err() unchanged")
	require.Zero(t, l.InFlight())
}

// Lower priorities are shed while room is kept for the higher ones, when
// callers are shed at once: each priority below the highest that asked in
// this update window or the last leaves an eighth of the limit per level
// to those above it. Traffic of one priority alone, whichever, has the
// whole limit.
func TestPriorityThresholds(t *testing.T) {
	bg := context.Background()
	at := func(p adaptive.Priority) context.Context { return adaptive.ContextWithPriority(bg, p) }
	fill := func(l *adaptive.Limiter, p adaptive.Priority) int {
		n := 0
		for ; ; n++ {
			if _, err := l.Acquire(at(p)); err != nil {
				require.ErrorIs(t, err, admit.ErrOverloaded)
				return n
			}
		}
	}

	// Only Sheddable callers: the whole limit is theirs.
	l, _ := newFake(t, adaptive.WithInitialLimit(8))
	require.Equal(t, 8, fill(l, adaptive.Sheddable))

	// A High caller has been seen: Sheddable (three levels below) up to
	// 5/8, Low 6/8, Normal 7/8, High the whole limit.
	l, _ = newFake(t, adaptive.WithInitialLimit(8))
	p, err := l.Acquire(at(adaptive.High))
	require.NoError(t, err)
	p.Success()
	require.Equal(t, 5, fill(l, adaptive.Sheddable))
	require.Equal(t, 1, fill(l, adaptive.Low))
	require.Equal(t, 1, fill(l, adaptive.Normal))
	require.Equal(t, 1, fill(l, adaptive.High))
	require.Equal(t, 8, l.InFlight())
	// Critical, now the highest, has the whole limit too, and nothing
	// more.
	require.Zero(t, fill(l, adaptive.Critical))

	// Never below one permit for a priority of its own.
	l, _ = newFake(t, adaptive.WithInitialLimit(2))
	_, err = l.Acquire(at(adaptive.Critical))
	require.NoError(t, err)
	require.Zero(t, fill(l, adaptive.Sheddable), "2 - ⌈2*4/8⌉ = 1, already out")

	// Small limits still keep room for the priorities above: the share
	// left to them is rounded up, so a limit below 8 keeps at least one
	// permit from a lower priority (rounded down, limit*levels/8 would be
	// 0 and Normal would take every permit while High callers wait).
	for _, tc := range []struct {
		limit     int
		low, high adaptive.Priority
		want      int
	}{
		{7, adaptive.Normal, adaptive.High, 6},        // 7 - ⌈7/8⌉
		{3, adaptive.Low, adaptive.High, 2},           // 3 - ⌈6/8⌉
		{2, adaptive.Sheddable, adaptive.Normal, 1},   // 2 - ⌈4/8⌉
		{2, adaptive.Normal, adaptive.High, 1},        // 2 - ⌈2/8⌉
		{9, adaptive.Sheddable, adaptive.Critical, 4}, // 9 - ⌈36/8⌉
	} {
		l, _ = newFake(t, adaptive.WithInitialLimit(tc.limit))
		p, err = l.Acquire(at(tc.high))
		require.NoError(t, err)
		p.Success()
		require.Equal(t, tc.want, fill(l, tc.low), "limit %d, %v below %v", tc.limit, tc.low, tc.high)
		require.Equal(t, tc.limit-tc.want, fill(l, tc.high), "limit %d: the rest is %v's", tc.limit, tc.high)
	}

	// With a backlog the order of the backlog ranks callers, and every
	// priority may use the whole limit: no permit stays idle while a
	// lower priority waits.
	l, _ = newFake(t, adaptive.WithInitialLimit(8), adaptive.WithBacklog(1, time.Second))
	p, err = l.Acquire(at(adaptive.High))
	require.NoError(t, err)
	p.Success()
	for range 8 {
		_, err := l.Acquire(at(adaptive.Sheddable))
		require.NoError(t, err)
	}
	require.Equal(t, 8, l.InFlight())
}

func TestPriorityContext(t *testing.T) {
	bg := context.Background()
	require.Equal(t, adaptive.Normal, adaptive.PriorityFrom(bg))
	require.Equal(t, adaptive.Critical, adaptive.PriorityFrom(adaptive.ContextWithPriority(bg, 100)))
	require.Equal(t, adaptive.Sheddable, adaptive.PriorityFrom(adaptive.ContextWithPriority(bg, -100)))
	for p, s := range map[adaptive.Priority]string{adaptive.Critical: "critical", adaptive.High: "high", adaptive.Normal: "normal",
		adaptive.Low: "low", adaptive.Sheddable: "sheddable", 9: "priority(9)"} {
		require.Equal(t, s, p.String())
	}
}

// acquireAsync starts Acquire in a goroutine and returns its result.
func acquireAsync(l *adaptive.Limiter, ctx context.Context) <-chan result {
	ch := make(chan result, 1)
	go func() {
		p, err := l.Acquire(ctx)
		ch <- result{p, err}
	}()
	return ch
}

type result struct {
	p   *adaptive.Permit
	err error
}

func TestBacklog(t *testing.T) {
	bg := context.Background()
	l, clk := newFake(t, adaptive.WithInitialLimit(1), adaptive.WithBacklog(2, 100*time.Millisecond))
	held, err := l.Acquire(bg)
	require.NoError(t, err)

	// A waiter is handed the permit its predecessor releases.
	w1 := acquireAsync(l, bg)
	require.NoError(t, clk.WaitForSleepers(bg, 1))
	held.Success()
	r := <-w1
	require.NoError(t, r.err)
	require.Equal(t, 1, l.InFlight())

	// A waiter that reaches maxWait is shed.
	w2 := acquireAsync(l, bg)
	require.NoError(t, clk.WaitForSleepers(bg, 1))
	clk.Advance(100 * time.Millisecond)
	r2 := <-w2
	require.ErrorIs(t, r2.err, admit.ErrOverloaded)
	var oe *adaptive.OverloadedError
	require.ErrorAs(t, r2.err, &oe)
	require.True(t, oe.Waited)

	// A waiter whose context ends gets ctx.Err() unchanged.
	ctx, cancel := context.WithCancel(bg)
	w3 := acquireAsync(l, ctx)
	require.NoError(t, clk.WaitForSleepers(bg, 1))
	cancel()
	r3 := <-w3
	require.Same(t, context.Canceled, r3.err)

	// A full backlog sheds the next caller at once.
	w4 := acquireAsync(l, bg)
	require.NoError(t, clk.WaitForSleepers(bg, 1))
	w5 := acquireAsync(l, bg)
	require.NoError(t, clk.WaitForSleepers(bg, 2))
	_, err = l.Acquire(bg)
	require.ErrorIs(t, err, admit.ErrOverloaded)
	require.Equal(t, 2, l.Stats().Waiting)

	// Waiters are served in arrival order.
	r.p.Success()
	r4 := <-w4
	require.NoError(t, r4.err)
	r4.p.Success()
	r5 := <-w5
	require.NoError(t, r5.err)
	r5.p.Ignore()
	s := l.Stats()
	require.Zero(t, s.InFlight)
	require.Equal(t, uint64(3), s.Waited)
	require.Equal(t, uint64(1), s.TimedOut)
	require.Equal(t, uint64(1), s.Cancelled)
}

func TestBacklogPriorities(t *testing.T) {
	bg := context.Background()
	l, clk := newFake(t, adaptive.WithInitialLimit(1), adaptive.WithBacklog(2, time.Second))
	low := adaptive.ContextWithPriority(bg, adaptive.Low)
	high := adaptive.ContextWithPriority(bg, adaptive.High)
	held, err := l.Acquire(bg)
	require.NoError(t, err)
	l1 := acquireAsync(l, low)
	require.NoError(t, clk.WaitForSleepers(bg, 1))
	l2 := acquireAsync(l, low)
	require.NoError(t, clk.WaitForSleepers(bg, 2))

	// A high-priority caller takes the place of the newest low one.
	h := acquireAsync(l, high)
	r := <-l2
	require.ErrorIs(t, r.err, admit.ErrOverloaded)
	require.NoError(t, clk.WaitForSleepers(bg, 2))
	// A low caller finds nobody below it: shed at once.
	_, err = l.Acquire(low)
	require.ErrorIs(t, err, admit.ErrOverloaded)

	// The released permit goes to the high waiter, though the low one
	// came first.
	held.Success()
	rh := <-h
	require.NoError(t, rh.err)
	select {
	case <-l1:
		t.Fatal("the low waiter was served before the high one released")
	default:
	}
	rh.p.Success()
	rl := <-l1
	require.NoError(t, rl.err)
	rl.p.Success()
	require.Equal(t, uint64(1), l.Stats().Displaced)
}

// The invariant: an admission never takes InFlight above Limit. Random
// interleavings of acquires and ends, with random latencies and outcomes,
// on a fake clock, through many limit changes.
func TestInFlightNeverAboveLimit(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		l, clk := newFake(t, adaptive.WithMinSamples(5), adaptive.WithInitialLimit(10))
		var held []*adaptive.Permit
		changes := 0
		last := l.Limit()
		for range 5000 {
			clk.Advance(time.Duration(rng.IntN(int(20 * time.Millisecond))))
			if rng.IntN(2) == 0 || len(held) == 0 {
				limit := l.Limit()
				p, err := l.Acquire(context.Background())
				if err != nil {
					require.ErrorIs(t, err, admit.ErrOverloaded)
					require.GreaterOrEqual(t, l.InFlight(), limit)
					continue
				}
				require.LessOrEqual(t, l.InFlight(), limit, "seed %d", seed)
				held = append(held, p)
				continue
			}
			i := rng.IntN(len(held))
			p := held[i]
			held = append(held[:i], held[i+1:]...)
			switch rng.IntN(10) {
			case 0:
				p.Dropped()
			case 1:
				p.Ignore()
			default:
				p.Success()
			}
			if l.Limit() != last {
				changes++
				last = l.Limit()
			}
		}
		require.Greater(t, changes, 5, "seed %d: the limit hardly moved", seed)
	}
}

// Drops lower the limit, however fast they come back.
// A few drops in a window, up to lossTolerance (5%) of its outcomes and
// more than one, are not a loss: callers that go away on their own must
// not drive the limit down. More are.
func TestDropsTolerated(t *testing.T) {
	l, clk := newFake(t, adaptive.WithInitialLimit(20), adaptive.WithLimitBounds(1, 20))
	ctx := context.Background()
	// One window of outcomes: n calls, 10 at a time, each 10 ms, the
	// first drops of them dropped.
	window := func(n, drops int) {
		for i := 0; i < n; i += 10 {
			var ps []*adaptive.Permit
			for range 10 {
				p, err := l.Acquire(ctx)
				require.NoError(t, err)
				ps = append(ps, p)
			}
			clk.Advance(10 * time.Millisecond)
			for _, p := range ps {
				if drops > 0 {
					p.Dropped()
					drops--
				} else {
					p.Success()
				}
			}
		}
	}
	window(40, 0) // sets the no-load estimate
	require.Equal(t, uint64(1), l.Stats().Updates)
	window(40, 2)
	require.Equal(t, uint64(2), l.Stats().Updates)
	require.Equal(t, 20, l.Limit(), "2 drops in 40: tolerated")
	window(40, 3)
	require.Equal(t, uint64(3), l.Stats().Updates)
	require.Equal(t, 18, l.Limit(), "3 drops in 40: a loss, a tenth off")
}

// One caller that goes away is no loss, however small the windows: with
// WithMinSamples(1) or (2) a lone drop neither closes a window nor moves
// the limit (1 in a window of 40 is within the tolerance), where two drops
// and no success are a window whose every call was lost, which halves it.
func TestLoneDropIsNoLoss(t *testing.T) {
	for _, ms := range []int{1, 2} {
		l, clk := newFake(t, adaptive.WithMinSamples(ms))
		one := func(drop bool) {
			p, err := l.Acquire(context.Background())
			require.NoError(t, err)
			clk.Advance(10 * time.Millisecond)
			if drop {
				p.Dropped()
			} else {
				p.Success()
			}
		}
		one(true)
		require.Zero(t, l.Stats().Updates, "minSamples %d: a lone drop closed a window", ms)
		for range 39 {
			one(false)
		}
		require.Equal(t, uint64(1), l.Stats().Updates, "minSamples %d", ms)
		require.Equal(t, adaptive.DefaultInitialLimit, l.Limit(), "minSamples %d", ms)
		one(true)
		one(true)
		require.Equal(t, uint64(2), l.Stats().Updates, "minSamples %d", ms)
		require.Equal(t, adaptive.DefaultInitialLimit/2, l.Limit(), "minSamples %d: two drops, no success", ms)
	}
}

// At a low rate of calls a window in which the limit binds closes after
// about windowRTTs (8) round trips' worth of outcomes, as many per round
// trip as calls in flight, instead of waiting for 40: two calls at a time
// of 100 ms each, a third shed, close one every 16 outcomes. A window in
// which the limit does not bind waits for its 40. (AIMD, so that no probe
// of the no-load latency, whose window takes its full count, intervenes.)
func TestWindowInRoundTrips(t *testing.T) {
	for _, bind := range []bool{true, false} {
		l, clk := newFake(t, adaptive.WithInitialLimit(2), adaptive.WithLimitBounds(2, 2), adaptive.WithAlgorithm(adaptive.AIMD()))
		ctx := context.Background()
		n := 0
		for l.Stats().Updates < 3 {
			a, err := l.Acquire(ctx)
			require.NoError(t, err)
			b, err := l.Acquire(ctx)
			require.NoError(t, err)
			if bind {
				_, err = l.Acquire(ctx)
				require.ErrorIs(t, err, admit.ErrOverloaded)
			}
			clk.Advance(100 * time.Millisecond)
			a.Success()
			b.Success()
			n += 2
			require.Less(t, n, 200)
		}
		want := map[bool]int{true: 16, false: 40}[bind]
		require.Equal(t, 3*want, n, "bind=%v", bind)
	}
}

func TestDropsLowerTheLimit(t *testing.T) {
	l, clk := newFake(t, adaptive.WithInitialLimit(100), adaptive.WithMinSamples(10))
	ctx := context.Background()
	prev := l.Limit()
	for range 5 {
		var ps []*adaptive.Permit
		for range 2 * l.Limit() {
			if p, err := l.Acquire(ctx); err == nil {
				ps = append(ps, p)
			}
		}
		clk.Advance(time.Millisecond)
		for i, p := range ps {
			if i%4 == 0 {
				p.Success()
			} else {
				p.Dropped()
			}
		}
		require.Less(t, l.Limit(), prev)
		prev = l.Limit()
	}
}

// A clock that goes back does not corrupt the state: no negative
// latency, no panic, every permit released.
func TestClockBackwards(t *testing.T) {
	l, clk := newFake(t, adaptive.WithMinSamples(1))
	for i := range 100 {
		p, err := l.Acquire(context.Background())
		require.NoError(t, err)
		if i%2 == 0 {
			clk.Advance(-time.Second)
		} else {
			clk.Advance(3 * time.Second)
		}
		p.Success()
	}
	require.Zero(t, l.InFlight())
	require.GreaterOrEqual(t, l.Limit(), 1)
}

func TestAlgorithmString(t *testing.T) {
	require.Equal(t, "gradient", adaptive.Gradient().String())
	require.Equal(t, "vegas", adaptive.Vegas().String())
	require.Equal(t, "aimd", adaptive.AIMD().String())
	require.True(t, strings.HasPrefix(adaptive.Algorithm{}.String(), "algorithm("))
}

// Acquire and Success allocate nothing on the path that admits at once.
func TestAcquireSuccessAllocs(t *testing.T) {
	l, err := adaptive.New()
	require.NoError(t, err)
	ctx := context.Background()
	n := testing.AllocsPerRun(1000, func() {
		p, err := l.Acquire(ctx)
		if err != nil {
			panic(err)
		}
		p.Success()
	})
	require.Zero(t, n)
}
