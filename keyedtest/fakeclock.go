package keyedtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// RunFakeClock runs the fake-clock cases against factory, which must honour
// admit.WithClock. Expected waits are the exact ones, rounded up to the
// nanosecond: a bucket holds n tokens RetryAfter after a denial, and not a
// nanosecond earlier.
func RunFakeClock(t *testing.T, factory Factory) {
	s := suite{make: factory}
	t.Run("Table", s.table)
	t.Run("WaitsCountDown", s.waitsCountDown)
	t.Run("ClampAfterIdle", s.clampAfterIdle)
	t.Run("HundredYearIdle", s.hundredYearIdle)
	t.Run("FractionalRates", s.fractionalRates)
	t.Run("ZeroRate", s.zeroRate)
	t.Run("BackwardClock", s.backwardClock)
	t.Run("FullEqualsNew", s.fullEqualsNew)
	t.Run("RandomWalk", s.randomWalk)
}

// start is an arbitrary non-zero origin: limiters must not assume the clock
// starts at 0.
const start = int64(1) << 40

// fake returns a limiter on a new FakeClock reading start.
func (s suite) fake(t *testing.T, capacity int64, rate float64) (admit.KeyedLimiter, *buckettest.FakeClock) {
	t.Helper()
	clk := buckettest.NewFakeClock(start)
	return s.limiter(t, capacity, rate, admit.WithClock(clk)), clk
}

// step is one row of a table: advance the clock, then AllowN(key, n) and
// expect the whole Decision (Limit is checked separately).
type step struct {
	advance time.Duration
	key     string
	n       int64
	want    admit.Decision
}

// dec builds an expected Decision.
func dec(allowed bool, remaining int64, retry, reset time.Duration) admit.Decision {
	return admit.Decision{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

const ms = time.Millisecond

func (s suite) table(t *testing.T) {
	cases := []struct {
		name     string
		capacity int64
		rate     float64
		steps    []step
	}{
		{"rate=1/capacity=3", 3, 1, []step{
			{0, "a", 0, dec(true, 3, 0, 0)},
			{0, "a", 1, dec(true, 2, 0, time.Second)},
			{0, "a", 2, dec(true, 0, 0, 3*time.Second)},
			{0, "a", 1, dec(false, 0, time.Second, 3*time.Second)},
			{0, "a", 3, dec(false, 0, 3*time.Second, 3*time.Second)},
			{0, "b", 3, dec(true, 0, 0, 3*time.Second)},
			{250 * ms, "a", 1, dec(false, 0, 750*ms, 2750*ms)},
			{750 * ms, "a", 0, dec(true, 1, 0, 2*time.Second)},
			{0, "a", 2, dec(false, 1, time.Second, 2*time.Second)},
			{time.Second, "a", 2, dec(true, 0, 0, 3*time.Second)},
			{time.Hour, "a", 3, dec(true, 0, 0, 3*time.Second)},
			{0, "b", 0, dec(true, 3, 0, 0)},
		}},
		// A token every 333 333 333 1/3 ns: waits round up.
		{"rate=3/capacity=3", 3, 3, []step{
			{0, "k", 3, dec(true, 0, 0, time.Second)},
			{0, "k", 1, dec(false, 0, 333_333_334, time.Second)},
			{333_333_333, "k", 1, dec(false, 0, 1, 666_666_667)},
			{1, "k", 1, dec(true, 0, 0, time.Second)},
			{666_666_666, "k", 2, dec(true, 0, 0, time.Second)},
		}},
		{"rate=0.5/capacity=2", 2, 0.5, []step{
			{0, "k", 2, dec(true, 0, 0, 4*time.Second)},
			{time.Second, "k", 1, dec(false, 0, time.Second, 3*time.Second)},
			{time.Second, "k", 1, dec(true, 0, 0, 4*time.Second)},
			{3 * time.Second, "k", 2, dec(false, 1, time.Second, time.Second)},
			{time.Second, "k", 2, dec(true, 0, 0, 4*time.Second)},
		}},
		{"rate=1e9/capacity=10", 10, 1e9, []step{
			{0, "k", 10, dec(true, 0, 0, 10)},
			{3, "k", 4, dec(false, 3, 1, 7)},
			{1, "k", 4, dec(true, 0, 0, 10)},
			{time.Second, "k", 0, dec(true, 10, 0, 0)},
		}},
		{"rate=1e-6/capacity=1", 1, 1e-6, []step{
			{0, "k", 1, dec(true, 0, 0, 1e6*time.Second)},
			{999_999 * time.Second, "k", 1, dec(false, 0, time.Second, time.Second)},
			{time.Second, "k", 1, dec(true, 0, 0, 1e6*time.Second)},
		}},
		{"capacity=1e9", 1e9, 1e9, []step{
			{0, "k", 1e9, dec(true, 0, 0, time.Second)},
			{500 * ms, "k", 1e9, dec(false, 5e8, 500*ms, 500*ms)},
			{0, "k", 5e8, dec(true, 0, 0, time.Second)},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, clk := s.fake(t, tc.capacity, tc.rate)
			for i, st := range tc.steps {
				clk.Advance(st.advance)
				d := allow(t, l, st.key, st.n)
				CheckDecision(t, tc.capacity, d, "step", i)
				st.want.Limit = tc.capacity
				require.Equal(t, st.want, d, "step %d: advance %v, AllowN(%q, %d)", i, st.advance, st.key, st.n)
			}
		})
	}
}

// waitsCountDown: with no calls in between, RetryAfter and ResetAfter
// shrink exactly as the clock moves, the request is denied a nanosecond
// before RetryAfter and allowed at it, and the bucket is short a nanosecond
// before ResetAfter and full at it.
func (s suite) waitsCountDown(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
		n        int64
	}{{3, 3, 2}, {5, 7.3, 3}, {1, 1.0 / 3, 1}, {10, 1e5, 7}, {2, 0.5, 1}} {
		t.Run(fmt.Sprintf("capacity=%d/rate=%v/n=%d", tc.capacity, tc.rate, tc.n), func(t *testing.T) {
			l, clk := s.fake(t, tc.capacity, tc.rate)
			require.True(t, allow(t, l, "k", tc.capacity).Allowed)
			d := allow(t, l, "k", tc.n)
			require.False(t, d.Allowed)
			require.GreaterOrEqual(t, d.ResetAfter, d.RetryAfter)
			retry, reset := d.RetryAfter, d.ResetAfter
			clk.Advance(retry / 3)
			d = allow(t, l, "k", tc.n)
			require.False(t, d.Allowed)
			assert.Equal(t, retry-retry/3, d.RetryAfter, "RetryAfter counts down with the clock")
			assert.Equal(t, reset-retry/3, d.ResetAfter, "ResetAfter counts down with the clock")
			retry, reset = d.RetryAfter, d.ResetAfter
			clk.Advance(retry - 1)
			d = allow(t, l, "k", tc.n)
			require.False(t, d.Allowed, "a nanosecond before RetryAfter")
			assert.Equal(t, time.Duration(1), d.RetryAfter)
			clk.Advance(1)
			d = allow(t, l, "k", 0)
			assert.Equal(t, reset-retry, d.ResetAfter, "ResetAfter at the RetryAfter instant")
			require.True(t, allow(t, l, "k", tc.n).Allowed, "at RetryAfter")
			d = allow(t, l, "k", 0)
			reset = d.ResetAfter
			clk.Advance(reset - 1)
			d = allow(t, l, "k", 0)
			assert.Equal(t, time.Duration(1), d.ResetAfter, "a nanosecond before ResetAfter")
			assert.Less(t, d.Remaining, tc.capacity+1)
			clk.Advance(1)
			d = allow(t, l, "k", 0)
			assert.Zero(t, d.ResetAfter, "at ResetAfter")
			assert.Equal(t, tc.capacity, d.Remaining, "full at ResetAfter")
		})
	}
}

func (s suite) clampAfterIdle(t *testing.T) {
	l, clk := s.fake(t, 5, 1)
	require.True(t, allow(t, l, "k", 3).Allowed)
	clk.Advance(time.Hour)
	d := allow(t, l, "k", 0)
	assert.Equal(t, int64(5), d.Remaining, "an hour's refill is capped at the capacity")
	assert.Zero(t, d.ResetAfter)
	require.True(t, allow(t, l, "k", 5).Allowed)
	assert.False(t, allow(t, l, "k", 1).Allowed, "the clamp kept nothing beyond the capacity")
}

func (s suite) hundredYearIdle(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
	}{{1e9, 1e9}, {1, 1e-6}, {1e9, 1e-6}, {1, 1e9}, {10, 1e5}} {
		t.Run(fmt.Sprintf("capacity=%d/rate=%v", tc.capacity, tc.rate), func(t *testing.T) {
			l, clk := s.fake(t, tc.capacity, tc.rate)
			require.True(t, allow(t, l, "k", tc.capacity).Allowed)
			clk.Advance(time.Duration(hundred))
			want := min(tc.capacity, int64(math.Floor(tc.rate*float64(hundred)/1e9)))
			d := allow(t, l, "k", 0)
			assert.Equal(t, want, d.Remaining, "after 100 years")
			assert.True(t, allow(t, l, "k", want).Allowed)
			assert.False(t, allow(t, l, "k", 1).Allowed, "and not beyond: no overflow")
			clk.Advance(time.Duration(math.Ceil(1 / tc.rate * 1e9)))
			assert.True(t, allow(t, l, "k", 1).Allowed, "refills after the idle span")
		})
	}
}

// fractionalRates takes every whole token as soon as it exists for up to
// 1e6 tokens' worth of time in uneven steps: the total stays within one
// token of capacity + rate × elapsed.
func (s suite) fractionalRates(t *testing.T) {
	for _, rate := range []float64{0.5, 1.0 / 3, 1e-6, 7.3} {
		t.Run(fmt.Sprintf("rate=%v", rate), func(t *testing.T) {
			const capacity = 100
			l, clk := s.fake(t, capacity, rate)
			span := min(1e6/rate*1e9, float64(hundred))
			const steps = 20_000
			require.True(t, allow(t, l, "k", capacity).Allowed)
			admitted, elapsed := int64(capacity), int64(0)
			for i := range steps {
				d := int64(span/steps*float64(1+i%7)/4) + 1
				clk.Advance(time.Duration(d))
				elapsed += d
				if n := allow(t, l, "k", 0).Remaining; n > 0 {
					require.True(t, allow(t, l, "k", n).Allowed, "step %d: the %d tokens a peek reported", i, n)
					admitted += n
				}
			}
			exact := capacity + rate*float64(elapsed)/1e9
			assert.InDelta(t, exact, float64(admitted), 1, "admitted over %v", time.Duration(elapsed))
			assert.LessOrEqual(t, float64(admitted), exact+1e-9*exact, "never above the bound")
		})
	}
}

func (s suite) zeroRate(t *testing.T) {
	l, clk := s.fake(t, 3, 0)
	require.True(t, allow(t, l, "k", 3).Allowed, "a zero-rate bucket still starts full")
	clk.Advance(time.Duration(hundred))
	d := allow(t, l, "k", 1)
	assert.False(t, d.Allowed, "and never refills")
	CheckDecision(t, 3, d)
	assert.GreaterOrEqual(t, d.RetryAfter, Never, "a wait that never ends")
	assert.GreaterOrEqual(t, d.ResetAfter, Never, "a wait that never ends")
	d = allow(t, l, "other", 2)
	assert.True(t, d.Allowed, "another key is full")
	assert.GreaterOrEqual(t, d.ResetAfter, Never)
}

// backwardClock: a reading earlier than one a key's bucket has applied adds
// nothing, and is not remembered: the refill that follows counts from the
// latest reading. Waits reported at a stale reading are never shorter than
// the real ones, counted from the latest reading.
func (s suite) backwardClock(t *testing.T) {
	l, clk := s.fake(t, 2, 1)
	clk.Advance(10 * time.Second)
	require.True(t, allow(t, l, "k", 2).Allowed)
	clk.Advance(-5 * time.Second)
	d := allow(t, l, "k", 1)
	assert.False(t, d.Allowed, "a reading from the past adds nothing")
	assert.GreaterOrEqual(t, d.RetryAfter, time.Second, "never earlier than the real wait")
	assert.GreaterOrEqual(t, d.ResetAfter, 2*time.Second, "never earlier than the real wait")
	clk.Advance(5*time.Second + 500*ms)
	assert.False(t, allow(t, l, "k", 1).Allowed, "half a second after the latest reading")
	clk.Advance(500 * ms)
	assert.False(t, allow(t, l, "k", 2).Allowed, "the backward reading was not remembered")
	d = allow(t, l, "k", 1)
	assert.True(t, d.Allowed, "exactly one second's refill")
	assert.Zero(t, d.Remaining)

	// A clock that starts before its origin and jumps around the int64 range.
	l2, clk2 := s.fake(t, 1, 1)
	clk2.Set(math.MinInt64)
	assert.True(t, allow(t, l2, "k", 1).Allowed)
	clk2.Set(math.MaxInt64)
	assert.True(t, allow(t, l2, "k", 1).Allowed, "a far-future reading clamps at the capacity")
	clk2.Set(start)
	assert.False(t, allow(t, l2, "k", 1).Allowed)
}

// fullEqualsNew: a key whose bucket has refilled decides exactly like a key
// never seen, so forgetting full keys is invisible.
func (s suite) fullEqualsNew(t *testing.T) {
	l, clk := s.fake(t, 4, 3)
	require.True(t, allow(t, l, "old", 4).Allowed)
	for round := range 5 {
		clk.Advance(time.Duration(round+2) * time.Second) // at least 4/3 s: full again
		key := fmt.Sprint("new-", round)
		for _, n := range []int64{0, 1, 3, 1, 0, 2} {
			a, b := allow(t, l, "old", n), allow(t, l, key, n)
			require.Equal(t, b, a, "round %d: AllowN(%d) on a refilled key and on a new one", round, n)
		}
	}
}

// randomWalk interleaves random clock steps (backward ones included) and
// random requests over a few keys, on several capacities and rates, and
// checks after every call: the Decision's invariants; that a denial's
// RetryAfter is honoured (the same request is allowed once the clock reads
// that far past the latest reading so far, if no other request on the key
// was admitted meanwhile); and the bound on every window of each key's
// admissions (see buckettest.Bound.AdmitWithin: an admission's time lies between the
// key's latest reading and the latest reading of all).
func (s suite) randomWalk(t *testing.T) {
	for seed := range uint64(16) {
		capacity := []int64{1, 2, 5, 10, 100}[seed%5]
		rate := []float64{1, 3, 0.5, 1.0 / 3, 7.3, 1e3, 1e6, 0}[seed%8]
		t.Run(fmt.Sprintf("seed=%d/capacity=%d/rate=%v", seed, capacity, rate), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			l, clk := s.fake(t, capacity, rate)
			period := int64(1e9) // the time one token takes, or a second at rate 0
			if rate > 0 {
				period = int64(math.Ceil(1e9 / rate))
			}
			type promise struct {
				n     int64
				until int64 // a reading at or after which the request must be allowed
			}
			type keyState struct {
				win    *buckettest.Bound
				latest int64 // the latest reading a call on the key made
				owed   *promise
			}
			keys := map[string]*keyState{}
			now, latest := start, start
			for i := range 4000 {
				switch r := rng.IntN(10); {
				case r < 4:
					now += rng.Int64N(2*period/capacity + 2)
				case r == 4:
					now -= rng.Int64N(3 * period) // backward
				case r == 5:
					now += rng.Int64N(10 * period)
				}
				clk.Set(now)
				latest = max(latest, now)
				key := []string{"", "a", "b", "c"}[rng.IntN(4)]
				ks := keys[key]
				if ks == nil {
					ks = &keyState{win: buckettest.NewBound(capacity, rate), latest: now}
					keys[key] = ks
				}
				ks.latest = max(ks.latest, now)
				n := rng.Int64N(capacity + 1)
				if ks.owed != nil && rng.IntN(2) == 0 {
					n = ks.owed.n
				}
				d := allow(t, l, key, n)
				CheckDecision(t, capacity, d, "op", i)
				if p := ks.owed; p != nil && p.n == n && now >= p.until {
					require.True(t, d.Allowed, "op %d: key %q denied %d tokens at %d, after its RetryAfter passed at %d", i, key, n, now, p.until)
				}
				switch {
				case d.Allowed && n > 0:
					ks.owed = nil // this admission took what was promised
					require.True(t, ks.win.AdmitWithin(ks.latest, latest, n),
						"op %d: key %q admitted more than capacity + rate × window", i, key)
				case !d.Allowed && d.RetryAfter < Never && (ks.owed == nil || ks.owed.n != n):
					ks.owed = &promise{n: n, until: latest + int64(d.RetryAfter)}
				}
			}
		})
	}
}
