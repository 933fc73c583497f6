// Package buckettest is the conformance suite every token bucket in this
// module passes, exported so that other implementations of admit.Limiter
// can run it too, and the FakeClock it runs on.
//
// A bucket package calls it from one test:
//
//	func TestConformance(t *testing.T) { buckettest.Run(t, mutexbucket.New) }
//
// Deterministic cases run on a FakeClock with explicit time steps; storm
// cases run on the real clock under many goroutines and check only the
// bound that must hold whatever the scheduling: never more than
// capacity + rate × elapsed admitted. The storms that block run under a
// Watchdog, so that a deadlock fails with every goroutine's stack.
//
// A limiter with a Shards() int method is allowed to trail the exact
// reference by up to that many tokens where the contract allows it (rule 4
// of the design); every other limiter must be exact. Stale clock readings
// are held to the latest-reading rule (a stale reading counts as the latest
// one applied) unless the limiter implements NoLatestReading, which is held
// to its own rule instead; a sharded limiter checks its per-shard rule in
// its own tests.
package buckettest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/admit-go/admit"
)

// Factory is a bucket constructor with the signature every bucket package
// exports as New.
type Factory[L admit.Limiter] func(capacity int64, refillPerSecond float64, opts ...admit.Option) (L, error)

// Run runs the conformance suite against newBucket.
func Run[L admit.Limiter](t *testing.T, newBucket Factory[L]) {
	s := suite{t: t, make: func(c int64, r float64, opts ...admit.Option) (admit.Limiter, error) {
		return newBucket(c, r, opts...)
	}}
	t.Run("Burst", s.burst)
	t.Run("Refill", s.refill)
	t.Run("ClampAfterIdle", s.clampAfterIdle)
	t.Run("HundredYearIdle", s.hundredYearIdle)
	t.Run("FractionalRates", s.fractionalRates)
	t.Run("EveryWholeToken", s.everyWholeToken)
	t.Run("ZeroRate", s.zeroRate)
	t.Run("BackwardClock", s.backwardClock)
	t.Run("BackwardReadingInAcquire", s.backwardReadingInAcquire)
	t.Run("TokensFloor", s.tokensFloor)
	t.Run("TryAcquireNEdges", s.tryAcquireNEdges)
	t.Run("InvalidConfig", s.invalidConfig)
	t.Run("ValidConfig", s.validConfig)
	t.Run("WaitFromDeficit", s.waitFromDeficit)
	t.Run("DeadlineTooEarly", s.deadlineTooEarly)
	t.Run("Unsatisfiable", s.unsatisfiable)
	t.Run("Cancel", s.cancel)
	t.Run("Waiters", s.waiters)
	t.Run("LaterWaitersAfterCancel", s.laterWaiters)
	t.Run("RefundsAfterClamp", s.refundsAfterClamp)
	t.Run("StaleUndo", s.staleUndo)
	t.Run("CancelGivesAllBack", s.cancelGivesAllBack)
	t.Run("ConcurrentReservations", s.concurrentReservations)
	t.Run("Storm", s.storm)
	t.Run("BlockingStorm", s.blockingStorm)
	t.Run("MixedStorm", s.mixedStorm)
	t.Run("NoGoroutines", s.noGoroutines)
}

type suite struct {
	t    *testing.T
	make func(capacity int64, rate float64, opts ...admit.Option) (admit.Limiter, error)
}

// start is an arbitrary non-zero origin: buckets must not assume the clock
// starts at 0.
const start = int64(1) << 40

// Time spans used in the tables.
const (
	second  = int64(time.Second)
	hundred = 36525 * 24 * 3600 * second // 100 Julian years
)

// fake returns a bucket on a new FakeClock reading start.
func (s suite) fake(t *testing.T, capacity int64, rate float64) (admit.Limiter, *FakeClock) {
	t.Helper()
	clk := NewFakeClock(start)
	l, err := s.make(capacity, rate, admit.WithClock(clk))
	require.NoError(t, err, "New(%d, %v)", capacity, rate)
	return l, clk
}

// slack is how many tokens l may trail an exact bucket by.
func slack(l admit.Limiter) int64 {
	if sh, ok := l.(interface{ Shards() int }); ok {
		return int64(sh.Shards())
	}
	return 0
}

// drain takes every whole token and returns how many it took.
func drain(l admit.Limiter) int64 {
	var n int64
	for l.TryAcquire() {
		n++
	}
	return n
}

func (s suite) burst(t *testing.T) {
	for _, c := range []int64{1, 2, 3, 10, 100, 1e9} {
		t.Run(fmt.Sprintf("capacity=%d", c), func(t *testing.T) {
			l, _ := s.fake(t, c, 1)
			assert.Equal(t, float64(c), l.Tokens())
			require.True(t, l.TryAcquireN(c), "a new bucket holds its capacity")
			assert.False(t, l.TryAcquire(), "and no more")
			assert.Equal(t, 0.0, l.Tokens())
		})
	}
	t.Run("one-by-one", func(t *testing.T) {
		l, _ := s.fake(t, 7, 1)
		assert.Equal(t, int64(7), drain(l))
	})
}

// step is one move of a refill table: advance the clock, then TryAcquireN(n)
// and expect want, then expect the balance to be tokens.
type step struct {
	advance time.Duration
	n       int64
	want    bool
	tokens  float64
}

func (s suite) refill(t *testing.T) {
	cases := []struct {
		name     string
		capacity int64
		rate     float64
		steps    []step
	}{
		{"rate=1/capacity=1", 1, 1, []step{
			{0, 1, true, 0},
			{0, 1, false, 0},
			{999_999_999, 1, false, 0.999999999},
			{1, 1, true, 0},
			{time.Second, 1, true, 0},
		}},
		{"rate=10/capacity=5", 5, 10, []step{
			{0, 5, true, 0},
			{100 * time.Millisecond, 1, true, 0},
			{250 * time.Millisecond, 2, true, 0.5},
			{0, 1, false, 0.5},
			{50 * time.Millisecond, 1, true, 0},
			{time.Hour, 5, true, 0},
		}},
		{"rate=0.5/capacity=2", 2, 0.5, []step{
			{0, 2, true, 0},
			{time.Second, 1, false, 0.5},
			{time.Second, 1, true, 0},
			{3 * time.Second, 2, false, 1.5},
			{time.Second, 2, true, 0},
		}},
		{"rate=3/capacity=3", 3, 3, []step{
			{0, 3, true, 0},
			{333_333_333, 1, false, 0.999999999},
			{1, 1, true, 0.000000002},
			{666_666_666, 2, true, 0},
		}},
		{"rate=1e9/capacity=10", 10, 1e9, []step{
			{0, 10, true, 0},
			{3, 4, false, 3},
			{1, 4, true, 0},
			{time.Second, 10, true, 0},
		}},
		{"rate=1e-6/capacity=1", 1, 1e-6, []step{
			{0, 1, true, 0},
			{999_999 * time.Second, 1, false, 0.999999},
			{time.Second, 1, true, 0},
		}},
		{"TryAcquireN-all-or-nothing", 10, 1, []step{
			{0, 7, true, 3},
			{0, 4, false, 3},
			{0, 3, true, 0},
			{2 * time.Second, 3, false, 2},
			{time.Second, 3, true, 0},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, clk := s.fake(t, tc.capacity, tc.rate)
			for i, st := range tc.steps {
				clk.Advance(st.advance)
				require.Equal(t, st.want, l.TryAcquireN(st.n), "step %d: advance %v, TryAcquireN(%d)", i, st.advance, st.n)
				assert.InDelta(t, st.tokens, l.Tokens(), 1e-6, "step %d: balance", i)
			}
		})
	}
}

func (s suite) clampAfterIdle(t *testing.T) {
	l, clk := s.fake(t, 5, 1)
	require.True(t, l.TryAcquireN(3))
	clk.Advance(time.Hour)
	assert.Equal(t, 5.0, l.Tokens(), "an hour's refill is capped at the capacity")
	assert.True(t, l.TryAcquireN(5))
	assert.False(t, l.TryAcquire(), "the clamp kept nothing beyond the capacity")
}

func (s suite) hundredYearIdle(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
	}{{1e9, 1e9}, {1, 1e-6}, {1e9, 1e-6}, {1, 1e9}, {10, 1e5}} {
		t.Run(fmt.Sprintf("capacity=%d/rate=%v", tc.capacity, tc.rate), func(t *testing.T) {
			l, clk := s.fake(t, tc.capacity, tc.rate)
			require.True(t, l.TryAcquireN(tc.capacity))
			clk.Advance(time.Duration(hundred))
			// Full, unless the rate is too slow to refill it in 100 years.
			want := min(float64(tc.capacity), math.Floor(tc.rate*float64(hundred)/1e9))
			assert.InDelta(t, want, math.Floor(l.Tokens()), 0, "after 100 years")
			assert.True(t, l.TryAcquireN(int64(want)))
			assert.False(t, l.TryAcquire(), "and not beyond: no overflow")
			// Waiting for a full bucket near the horizon is too long for the
			// deadline, impossible, or (fast rates) a sleep on the fake clock
			// that the deadline ends: never an instant admission, and the
			// bucket is left as it was.
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			err := l.AcquireN(ctx, tc.capacity)
			assert.True(t, errors.Is(err, admit.ErrDeadline) || errors.Is(err, admit.ErrUnsatisfiable) ||
				err == context.DeadlineExceeded, "AcquireN: %v", err)
			assert.Less(t, l.Tokens(), 1.0, "and consumed nothing")
			// Refill still works after the idle span.
			clk.Advance(time.Duration(math.Ceil(1 / tc.rate * 1e9)))
			assert.True(t, l.TryAcquire(), "refills after the idle span")
		})
	}
}

// fractionalRates runs each rate for up to 1e6 tokens' worth of time (or 100
// years, whichever is shorter) in many uneven steps, taking every whole token
// as soon as it exists. An implementation that rounds each refill on its own
// loses a fraction per step and falls behind by many tokens.
func (s suite) fractionalRates(t *testing.T) {
	for _, rate := range []float64{0.5, 1.0 / 3, 1e-6, 7.3} {
		t.Run(fmt.Sprintf("rate=%v", rate), func(t *testing.T) {
			// The capacity exceeds any one step's refill (at most 35
			// tokens), so no refill is lost to the cap.
			const capacity = 100
			l, clk := s.fake(t, capacity, rate)
			span := min(1e6/rate*1e9, float64(hundred))
			const steps = 50_000
			require.True(t, l.TryAcquireN(capacity))
			admitted, elapsed := int64(capacity), int64(0)
			for i := range steps {
				// Uneven steps averaging span/steps, none a multiple of the token period.
				d := int64(span/steps*float64(1+i%7)/4) + 1
				clk.Advance(time.Duration(d))
				elapsed += d
				if n := int64(l.Tokens()); n > 0 && l.TryAcquireN(n) {
					admitted += n
				}
				admitted += drain(l)
			}
			exact := capacity + rate*float64(elapsed)/1e9 // the initial burst plus the refill
			got := float64(admitted) + l.Tokens()
			assert.InDelta(t, exact, got, 1, "admitted %d + balance %v over %v", admitted, l.Tokens(), time.Duration(elapsed))
			assert.LessOrEqual(t, float64(admitted), exact, "never above the bound")
		})
	}
}

// everyWholeToken checks rule 4's lower bound: a caller that asks at every
// whole token gets at least capacity + rate × T − 1 (− the shard count).
func (s suite) everyWholeToken(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
		step     time.Duration
	}{
		// Each step refills less than capacity − 1, or (capacity 1) exactly
		// one token, so asking at every step asks at every whole token and
		// nothing is lost to the cap.
		{5, 1000, time.Millisecond},
		{10, 1e5, 7 * time.Microsecond},
		{2, 3, 100 * time.Millisecond},
		{1, 4, 250 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("capacity=%d/rate=%v", tc.capacity, tc.rate), func(t *testing.T) {
			l, clk := s.fake(t, tc.capacity, tc.rate)
			const steps = 2000
			admitted := drain(l)
			for range steps {
				clk.Advance(tc.step)
				admitted += drain(l)
			}
			bound := float64(tc.capacity) + tc.rate*float64(steps)*tc.step.Seconds()
			assert.LessOrEqual(t, float64(admitted), bound+1)
			assert.GreaterOrEqual(t, float64(admitted), math.Floor(bound)-1-float64(slack(l)))
		})
	}
}

func (s suite) zeroRate(t *testing.T) {
	l, clk := s.fake(t, 3, 0)
	assert.Equal(t, int64(3), drain(l), "a zero-rate bucket still starts full")
	clk.Advance(time.Duration(hundred))
	assert.False(t, l.TryAcquire(), "and never refills")
	assert.Equal(t, 0.0, l.Tokens())
	err := l.AcquireN(context.Background(), 1)
	require.ErrorIs(t, err, admit.ErrUnsatisfiable, "waiting cannot help at rate 0")
}

func (s suite) backwardClock(t *testing.T) {
	one, clk1 := s.fake(t, 1, 1)
	clk1.Advance(10 * time.Second)
	require.True(t, one.TryAcquire())
	clk1.Advance(-5 * time.Second)
	assert.False(t, one.TryAcquire(), "a reading from the past adds nothing")
	assert.Equal(t, 0.0, one.Tokens())
	clk1.Advance(5*time.Second + 500*time.Millisecond)
	assert.False(t, one.TryAcquire(), "half a second after the latest reading")
	clk1.Advance(500 * time.Millisecond)
	assert.True(t, one.TryAcquire(), "one second after the latest reading")

	// An admission at a stale reading must not store that reading: had the
	// bucket remembered 5 s when it admitted, 6 s of refill would fill it.
	l, clk := s.fake(t, 2, 1)
	switch staleRule(l) {
	case perShard:
		// A sharded limiter keeps no timestamp at all: a stale reading sees
		// the smaller balance of that earlier moment (even with a single
		// shard), and can act at its own time on a shard that never saw the
		// later reading. It checks its own rule in its own tests.
		return
	case ownMoment:
		s.staleSeesItsMoment(t, l, clk)
	case latestReading:
		s.staleIsLatest(t, l, clk)
	}

	// A clock that starts before its origin and jumps around the int64 range.
	l2, clk2 := s.fake(t, 1, 1)
	clk2.Set(math.MinInt64)
	assert.True(t, l2.TryAcquire())
	clk2.Set(math.MaxInt64)
	assert.True(t, l2.TryAcquire(), "a far-future reading clamps at the capacity")
	clk2.Set(start)
	assert.False(t, l2.TryAcquire())
}

// staleIsLatest is the rule of a limiter that keeps its latest reading
// (mutexbucket, casbucket): a stale reading is treated as that latest one.
func (s suite) staleIsLatest(t *testing.T, l admit.Limiter, clk *FakeClock) {
	clk.Advance(10 * time.Second)
	require.True(t, l.TryAcquire())
	clk.Advance(-5 * time.Second)
	assert.Equal(t, 1.0, l.Tokens(), "a reading from the past adds nothing")
	require.True(t, l.TryAcquire(), "and takes what is there")
	clk.Advance(5*time.Second + 500*time.Millisecond)
	assert.False(t, l.TryAcquire(), "half a second after the latest reading")
	clk.Advance(500 * time.Millisecond)
	assert.False(t, l.TryAcquireN(2), "the backward reading was not remembered")
	assert.True(t, l.TryAcquire(), "exactly one second's refill")
}

// staleSeesItsMoment is the rule of a limiter that keeps no latest reading
// (gcra): its state is a point on the refill stream, so a stale reading
// sees the balance of its own, earlier moment, which is smaller, and stores
// nothing.
func (s suite) staleSeesItsMoment(t *testing.T, l admit.Limiter, clk *FakeClock) {
	clk.Advance(10 * time.Second)
	require.True(t, l.TryAcquire())
	clk.Advance(-5 * time.Second)
	assert.LessOrEqual(t, l.Tokens(), 1.0, "a reading from the past sees no more than the latest one")
	assert.False(t, l.TryAcquire(), "the balance of 5 s ago, 4 tokens short, takes nothing")
	clk.Advance(5*time.Second + 500*time.Millisecond)
	assert.InDelta(t, 1.5, l.Tokens(), 1e-6, "the stale reading changed nothing")
	require.True(t, l.TryAcquire())
	clk.Advance(500 * time.Millisecond)
	assert.False(t, l.TryAcquireN(2), "nothing beyond the refill since the admissions")
	assert.True(t, l.TryAcquire(), "exactly the refill: 3 admitted in 1 s at capacity 2, rate 1")
	assert.False(t, l.TryAcquire())
}

// Stale-reading rules, by what a limiter declares.
const (
	latestReading = iota // the default: a stale reading counts as the latest applied
	ownMoment            // NoLatestReading: a stale reading sees its own moment's balance
	perShard             // Shards: per shard; checked in the limiter's own tests
)

// NoLatestReading is implemented by a limiter that keeps no latest clock
// reading, so that a stale reading sees the smaller balance of its own
// moment instead of the balance at the latest reading (gcra). Run checks
// that rule for it in place of the latest-reading one.
type NoLatestReading interface {
	admit.Limiter
	NoLatestReading()
}

// staleRule returns the rule the suite holds l to on stale readings. The
// slack a limiter may trail mutexbucket by is a separate question (slack).
func staleRule(l admit.Limiter) int {
	if _, ok := l.(NoLatestReading); ok {
		return ownMoment
	}
	if _, ok := l.(interface{ Shards() int }); ok {
		return perShard
	}
	return latestReading
}

func (s suite) tryAcquireNEdges(t *testing.T) {
	l, _ := s.fake(t, 5, 1)
	assert.True(t, l.TryAcquireN(0), "n=0 is always true")
	assert.Equal(t, 5.0, l.Tokens(), "n=0 consumes nothing")
	for _, n := range []int64{-1, math.MinInt64, 6, math.MaxInt64} {
		assert.False(t, l.TryAcquireN(n), "TryAcquireN(%d)", n)
	}
	assert.Equal(t, 5.0, l.Tokens(), "rejected requests consume nothing")
	require.True(t, l.TryAcquireN(5))
	assert.True(t, l.TryAcquireN(0), "n=0 is true on an empty bucket too")
}

func (s suite) invalidConfig(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
		opts     []admit.Option
		mention  string
	}{
		{0, 1, nil, "0"},
		{-1, 1, nil, "-1"},
		{math.MinInt64, 1, nil, strconv.FormatInt(math.MinInt64, 10)},
		{1, -1, nil, "-1"},
		{1, -1e-9, nil, "-1e-09"},
		{1, math.NaN(), nil, "NaN"},
		{1, math.Inf(1), nil, "+Inf"},
		{1, math.Inf(-1), nil, "-Inf"},
		{1, math.MaxFloat64, nil, "1.7976931348623157e+308"},
		{1, 5e-324, nil, "5e-324"},
		{1, 1, []admit.Option{admit.WithClock(nil)}, "WithClock(nil)"},
		{1, 1, []admit.Option{nil}, "nil"},
	} {
		t.Run(fmt.Sprintf("capacity=%d/rate=%v/%s", tc.capacity, tc.rate, tc.mention), func(t *testing.T) {
			_, err := s.make(tc.capacity, tc.rate, tc.opts...)
			require.ErrorIs(t, err, admit.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.mention, "the error names the bad value")
		})
	}
}

func (s suite) validConfig(t *testing.T) {
	for _, c := range []int64{1, 2, 1000, 1e9} {
		for _, r := range []float64{0, 1e-6, 1.0 / 3, 1, 1e5, 1e9} {
			l, err := s.make(c, r)
			require.NoError(t, err, "New(%d, %v) must be accepted", c, r)
			assert.Equal(t, float64(c), l.Tokens())
		}
	}
}

// waitFor blocks until clk has n sleepers, failing the test if that takes
// unreasonably long (a hang guard, not a timing assertion).
func waitFor(t *testing.T, clk *FakeClock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, clk.WaitForSleepers(ctx, n), "waiting for %d sleepers (have %d)", n, clk.Sleepers())
}

func (s suite) waitFromDeficit(t *testing.T) {
	for _, tc := range []struct {
		capacity, take, n int64
		rate              float64
		wait              time.Duration
	}{
		{1, 1, 1, 2, 500 * time.Millisecond},
		{10, 10, 4, 1, 4 * time.Second},
		{10, 8, 4, 1, 2 * time.Second},
		{3, 3, 1, 3, 333_333_334},
		{10, 10, 10, 1e9, 10},
	} {
		t.Run(fmt.Sprintf("capacity=%d/take=%d/n=%d/rate=%v", tc.capacity, tc.take, tc.n, tc.rate), func(t *testing.T) {
			l, clk := s.fake(t, tc.capacity, tc.rate)
			require.True(t, l.TryAcquireN(tc.take))
			done := make(chan error, 1)
			go func() { done <- l.AcquireN(context.Background(), tc.n) }()
			waitFor(t, clk, 1)
			wake, ok := clk.NextWake()
			require.True(t, ok)
			assert.Equal(t, tc.wait, time.Duration(wake-start), "the wait follows from the deficit and the rate")
			clk.Advance(tc.wait)
			if !assert.Zero(t, clk.Sleepers(), "woken at the computed time") {
				clk.Set(wake) // let the waiter finish rather than hang the suite
			}
			require.NoError(t, <-done)
			assert.InDelta(t, float64(tc.capacity-tc.take)+tc.rate*tc.wait.Seconds()-float64(tc.n), l.Tokens(), 1e-6)
		})
	}
}

func (s suite) deadlineTooEarly(t *testing.T) {
	l, clk := s.fake(t, 2, 0.1)
	require.True(t, l.TryAcquire())
	// One token is there; two need 10 s more, and the deadline is in 1 s.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := l.AcquireN(ctx, 2)
	require.ErrorIs(t, err, admit.ErrDeadline)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "also a DeadlineExceeded for generic callers")
	assert.Equal(t, 0, clk.Sleepers(), "returned at once, without sleeping")
	assert.Equal(t, 1.0, l.Tokens(), "consumed nothing")
	assert.NoError(t, l.AcquireN(ctx, 1), "a request the deadline allows still succeeds")
}

func (s suite) unsatisfiable(t *testing.T) {
	l, clk := s.fake(t, 5, 1)
	ctx := context.Background()
	for _, n := range []int64{6, math.MaxInt64, -1} {
		err := l.AcquireN(ctx, n)
		require.ErrorIs(t, err, admit.ErrUnsatisfiable, "AcquireN(%d)", n)
		assert.Contains(t, err.Error(), strconv.FormatInt(n, 10))
	}
	assert.NoError(t, l.AcquireN(ctx, 0))
	assert.Equal(t, 5.0, l.Tokens())
	assert.Equal(t, 0, clk.Sleepers())

	z, _ := s.fake(t, 2, 0)
	require.NoError(t, z.AcquireN(ctx, 1), "rate 0 with enough tokens admits")
	require.ErrorIs(t, z.AcquireN(ctx, 2), admit.ErrUnsatisfiable)
	assert.Equal(t, 1.0, z.Tokens(), "and consumed nothing")

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	assert.Equal(t, context.Canceled, l.AcquireN(canceled, 1), "a done context admits nothing")
	assert.Equal(t, 5.0, l.Tokens())
}

func (s suite) cancel(t *testing.T) {
	l, clk := s.fake(t, 1, 1)
	require.True(t, l.TryAcquire())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Acquire(ctx) }()
	waitFor(t, clk, 1)
	cancel()
	err := <-done
	assert.Equal(t, context.Canceled, err, "ctx.Err() returned unchanged")
	assert.Equal(t, 0, clk.Sleepers())
	clk.Advance(time.Second)
	assert.True(t, l.TryAcquire(), "the cancelled request's token went to someone else")
}

// waiters starts 50 blocked Acquires on an empty bucket, one after another,
// and advances the clock one token period at a time: exactly one must be
// admitted per step, in arrival order, and TryAcquire must not overtake
// them. Admitted goroutines park on the clock, so that "every goroutine is
// asleep" marks the end of each step without polling.
func (s suite) waiters(t *testing.T) {
	const n = 50
	const period = 100 * time.Millisecond
	l, clk := s.fake(t, 1, float64(time.Second/period))
	require.True(t, l.TryAcquire())
	park, unpark := context.WithCancel(context.Background())
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	errs := make(chan error, n)
	defer func() { unpark(); wg.Wait() }()
	for i := range n {
		wg.Go(func() {
			if err := l.Acquire(context.Background()); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			_ = clk.Sleep(park, time.Duration(math.MaxInt64/2))
		})
		waitFor(t, clk, i+1) // arrival order is launch order
	}
	assert.InDelta(t, -float64(n), l.Tokens(), 1e-6, "every waiter holds a reservation")
	for k := 1; k <= n; k++ {
		clk.Advance(period)
		assert.False(t, l.TryAcquire(), "step %d: the new token belongs to a waiter", k)
		waitFor(t, clk, n)
		mu.Lock()
		got := len(order)
		mu.Unlock()
		require.Equal(t, k, got, "after %d token periods, %d admitted", k, k)
	}
	assert.Equal(t, func() []int {
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		return want
	}(), order, "admitted in arrival order")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// storm hammers a bucket on the real clock and checks the bound that no
// scheduling can excuse: admitted <= capacity + rate × elapsed + 1, where
// elapsed runs from before the first goroutine starts to after the last ends.
func (s suite) storm(t *testing.T) {
	if testing.Short() {
		t.Skip("real-clock storm")
	}
	for _, mix := range []struct {
		capacity int64
		rate     float64
	}{{10, 1e5}, {100, 1e3}, {1, 1e6}, {1000, 0}} {
		for _, g := range []int{2, 8, 64} {
			t.Run(fmt.Sprintf("capacity=%d/rate=%v/goroutines=%d", mix.capacity, mix.rate, g), func(t *testing.T) {
				t.Parallel()
				l, err := s.make(mix.capacity, mix.rate)
				require.NoError(t, err)
				// Even goroutines take one token at a time, odd ones 2 or 3.
				admitted, elapsed := Storm(l, g, 20*time.Millisecond, func(i int) int64 {
					if i%2 == 0 {
						return 1
					}
					return int64(2 + i%2*(i/2%2))
				})
				bound := float64(mix.capacity) + mix.rate*elapsed.Seconds() + 1
				assert.LessOrEqual(t, float64(admitted), bound, "admitted over %v", elapsed)
				tok := l.Tokens()
				assert.True(t, tok >= 0 && tok <= float64(mix.capacity), "Tokens() = %v outside [0, %d]", tok, mix.capacity)
			})
		}
	}
}

// blockingStorm mixes blocking Acquires, some cancelled while they wait,
// with TryAcquires on the real clock: reservations, their refunds and
// non-blocking takes together must stay within the bound, and the bucket
// must end with no debt once every waiter has returned.
func (s suite) blockingStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("real-clock storm")
	}
	const capacity, rate = 5, 2e4
	l, err := s.make(capacity, rate)
	require.NoError(t, err)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	begin := time.Now()
	for g := range 16 {
		wg.Go(func() {
			for i := range 40 {
				switch (g + i) % 4 {
				case 0: // cancelled while waiting, or admitted in time
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+i*7)*time.Microsecond)
					if err := l.AcquireN(ctx, 1+int64(i%2)); err == nil {
						admitted.Add(1 + int64(i%2))
					}
					cancel()
				case 1:
					if l.TryAcquire() {
						admitted.Add(1)
					}
				default:
					if err := l.Acquire(context.Background()); err == nil {
						admitted.Add(1)
					}
				}
			}
		})
	}
	Watchdog(t, HangAfter, "the blocking storm's goroutines to return", wg.Wait)
	elapsed := time.Since(begin)
	assert.LessOrEqual(t, float64(admitted.Load()), capacity+rate*elapsed.Seconds()+1, "admitted over %v", elapsed)
	// Every waiter has returned, so every reservation has come due (a
	// waiter sleeps until then), been given back, or been forfeited because
	// a later one stood on it. Forfeited tokens are debt the refill repays;
	// at most every goroutine's last request (2 tokens) can still be
	// outstanding, since each one's wake is no later than its deadline.
	tok := l.Tokens()
	assert.True(t, tok >= -16*2 && tok <= capacity, "Tokens() = %v outside [-32, %d]", tok, capacity)
}

// Storm runs g goroutines that call l.TryAcquireN(n(i)) (i is the
// goroutine's index) as fast as they can for about d once every one of them
// has made its first call, and returns the tokens admitted and the time from
// before the first goroutine started to after the last one ended: the span
// over which capacity + rate × elapsed bounds what any correct limiter
// admits, however the goroutines were scheduled. Waiting for the first calls
// means that a loaded machine, which may not run a goroutine for longer than
// d, cannot leave a storm without a single call.
func Storm(l admit.Limiter, g int, d time.Duration, n func(i int) int64) (admitted int64, elapsed time.Duration) {
	var stop atomic.Bool
	var total atomic.Int64
	var wg, started sync.WaitGroup
	begin := time.Now()
	started.Add(g)
	for i := range g {
		wg.Go(func() {
			var mine int64
			k := n(i)
			for first := true; first || !stop.Load(); first = false {
				if l.TryAcquireN(k) {
					mine += k
				}
				if first {
					started.Done()
				}
			}
			total.Add(mine)
		})
	}
	started.Wait()
	time.Sleep(d) // how long to storm, not an assertion
	stop.Store(true)
	wg.Wait()
	return total.Load(), time.Since(begin)
}

// noGoroutines checks that a bucket starts no goroutine of its own: not in
// New, not on any path, blocking ones included once they return.
func (s suite) noGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l, clk := s.fake(t, 2, 1)
	l.TryAcquireN(2)
	l.Tokens()
	done := make(chan error, 1)
	go func() { done <- l.Acquire(context.Background()) }()
	waitFor(t, clk, 1)
	clk.Advance(time.Second)
	require.NoError(t, <-done)
	rl, err := s.make(1, 1e3)
	require.NoError(t, err)
	require.NoError(t, rl.AcquireN(context.Background(), 1))
	require.NoError(t, rl.AcquireN(context.Background(), 1), "a real-clock wait of 1 ms")
}
