package keyedtest

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// PolicyFactory returns a new, empty admit.PolicyLimiter configured by opts,
// which RunPolicy never passes and RunPolicyFakeClock passes only as
// admit.WithClock; every call must return a limiter that shares no key with
// any other it returned (see Factory).
type PolicyFactory func(t *testing.T, opts ...admit.Option) (admit.PolicyLimiter, error)

// RunPolicy runs the real-clock cases of admit.PolicyLimiter's rules
// against factory: all or nothing, the per-limit bound in a storm, state
// per (key, Name), bad calls, eight and more limits per call, and the
// carry-over's rule for full buckets. Like Run, they never pass a clock and
// assert only what no scheduling excuses: exact counts on limits so slow
// (1e-3 tokens/s) that nothing refills during a test, or on a bucket
// awaited until it is full, which more time cannot change.
func RunPolicy(t *testing.T, factory PolicyFactory) {
	s := policySuite{make: factory}
	t.Run("AllOrNothing", s.allOrNothing)
	t.Run("StatePerName", s.statePerName)
	t.Run("BadCalls", s.badCalls)
	t.Run("ManyLimits", s.manyLimits)
	t.Run("DecisionFields", s.decisionFields)
	t.Run("CarryOverFull", s.carryOverFull)
	t.Run("Storm", s.storm)
}

// RunPolicyFakeClock runs the cases that step a buckettest.FakeClock and
// expect exact values: RetryAfter to the nanosecond under several limits,
// and the carry-over when a call changes a Name's Capacity or Rate.
func RunPolicyFakeClock(t *testing.T, factory PolicyFactory) {
	s := policySuite{make: factory}
	t.Run("ExactRetryAfter", s.exactRetryAfter)
	t.Run("CarryOver", s.carryOver)
}

type policySuite struct {
	make PolicyFactory
}

func (s policySuite) limiter(t *testing.T, opts ...admit.Option) admit.PolicyLimiter {
	t.Helper()
	l, err := s.make(t, opts...)
	require.NoError(t, err)
	require.NotNil(t, l)
	return l
}

// lim is a Limit with a name.
func lim(name string, capacity int64, rate float64) admit.Limit {
	return admit.Limit{Name: name, Capacity: capacity, Rate: rate}
}

// allowL calls AllowLimits and fails t on an error.
func allowL(t *testing.T, l admit.PolicyLimiter, key string, n int64, limits ...admit.Limit) admit.Decision {
	t.Helper()
	d, err := l.AllowLimits(context.Background(), key, n, limits...)
	require.NoError(t, err, "AllowLimits(%q, %d, %v)", key, n, limits)
	return d
}

// allOrNothing: a call that one limit denies takes from none; one that all
// admit takes n from each.
func (s policySuite) allOrNothing(t *testing.T) {
	l := s.limiter(t)
	a, b := lim("a", 3, slow), lim("b", 5, slow)
	require.True(t, allowL(t, l, "k", 2, a, b).Allowed) // a 1, b 3
	d := allowL(t, l, "k", 2, a, b)
	require.False(t, d.Allowed)
	assert.Equal(t, "a", d.Policy, "a decided the denial")
	// b still holds 3: the denial took nothing from it.
	assert.True(t, allowL(t, l, "k", 3, b).Allowed, "b kept its 3 tokens")
	assert.False(t, allowL(t, l, "k", 1, b).Allowed, "b is empty")
	// a still holds 1.
	assert.True(t, allowL(t, l, "k", 1, a).Allowed, "a kept its token")
	assert.False(t, allowL(t, l, "k", 1, a).Allowed)
	// Now b is empty and a too: a call that b denies leaves a fresh
	// limit c untouched.
	c := lim("c", 2, slow)
	assert.False(t, allowL(t, l, "k", 1, c, b).Allowed)
	assert.True(t, allowL(t, l, "k", 2, c).Allowed, "c was not taken from")
}

// statePerName: a Name the key has not used starts full; keys and Names are
// independent; a limit shares its state with calls that bring it among
// other limits.
func (s policySuite) statePerName(t *testing.T) {
	l := s.limiter(t)
	a, b := lim("a", 4, slow), lim("b", 4, slow)
	require.True(t, allowL(t, l, "k", 3, a).Allowed)
	d := allowL(t, l, "k", 0, a, b)
	assert.True(t, d.Allowed, "a peek")
	assert.Equal(t, int64(1), d.Remaining, "a has 1 left; b, never used, is full")
	assert.Equal(t, "a", d.Policy)
	d = allowL(t, l, "other", 0, a, b)
	assert.Equal(t, int64(4), d.Remaining, "another key is independent")
	require.True(t, allowL(t, l, "k", 1, a, b).Allowed) // a 0, b 3
	assert.False(t, allowL(t, l, "k", 1, a).Allowed, "a alone sees the same state")
	assert.True(t, allowL(t, l, "k", 3, b).Allowed, "b alone sees the same state")
}

// badCalls: rule 5. Nothing is consumed by any of them.
func (s policySuite) badCalls(t *testing.T) {
	l := s.limiter(t)
	ctx := context.Background()
	a, b := lim("a", 3, slow), lim("b", 5, slow)
	for name, limits := range map[string][]admit.Limit{
		"none":          nil,
		"duplicate":     {a, lim("a", 5, slow)},
		"capacity 0":    {a, lim("z", 0, 1)},
		"negative rate": {lim("z", 1, -1), b},
		"NaN rate":      {a, lim("z", 1, math.NaN())},
		"bad name":      {a, lim("z\n", 1, 1)},
	} {
		_, err := l.AllowLimits(ctx, "k", 1, limits...)
		assert.ErrorIs(t, err, admit.ErrInvalidConfig, name)
	}
	for _, n := range []int64{-1, 4, math.MaxInt64} {
		d, err := l.AllowLimits(ctx, "k", n, a, b)
		assert.ErrorIs(t, err, admit.ErrUnsatisfiable, "n=%d", n)
		assert.False(t, d.Allowed, "n=%d", n)
	}
	d := allowL(t, l, "k", 0, a, b)
	assert.Equal(t, int64(3), d.Remaining, "the bad calls consumed nothing")
	assert.Zero(t, d.ResetAfter, "every limit is full")
	assert.True(t, allowL(t, l, "k", 3, a, b).Allowed)
}

// manyLimits: at least 8 limits per call (here 12), decided all or nothing.
func (s policySuite) manyLimits(t *testing.T) {
	l := s.limiter(t)
	var limits []admit.Limit
	for i := range 12 {
		limits = append(limits, lim(fmt.Sprint("l", i), int64(10+i), slow))
	}
	require.True(t, allowL(t, l, "k", 10, limits...).Allowed)
	d := allowL(t, l, "k", 1, limits...)
	assert.False(t, d.Allowed)
	assert.Equal(t, "l0", d.Policy, "l0 is empty and needs the longest")
	assert.Zero(t, d.Remaining)
	d = allowL(t, l, "k", 11, limits[11])
	assert.True(t, d.Allowed, "l11 held 21 − 10 = 11: the denial took nothing")
}

// decisionFields: rule 4 on an allowed call: the limit with the fewest
// whole tokens left decides Policy, Limit and Remaining.
func (s policySuite) decisionFields(t *testing.T) {
	l := s.limiter(t)
	burst, daily := lim("burst", 5, slow), lim("daily", 7, slow)
	d := allowL(t, l, "k", 1, burst, daily)
	assert.True(t, d.Allowed)
	assert.Equal(t, admit.Decision{Allowed: true, Limit: 5, Remaining: 4, Policy: "burst", ResetAfter: d.ResetAfter}, d)
	assert.Positive(t, d.ResetAfter)
	d = allowL(t, l, "k", 0, lim("daily", 7, slow), lim("hourly", 2, slow))
	assert.Equal(t, "hourly", d.Policy, "hourly, never used, is full at 2: fewer than daily's 6")
	assert.Equal(t, int64(2), d.Remaining)
	assert.Equal(t, int64(2), d.Limit)
	d = allowL(t, l, "k", 4, burst, daily)
	assert.True(t, d.Allowed)
	assert.Equal(t, "burst", d.Policy, "burst 0, daily 2 left")
	assert.Zero(t, d.Remaining)
	d = allowL(t, l, "k", 3, burst, daily)
	assert.False(t, d.Allowed)
	assert.Equal(t, "burst", d.Policy, "burst needs 3 tokens, daily only 1: burst waits longest at the same rate")
	assert.Zero(t, d.Remaining)
	assert.Equal(t, int64(5), d.Limit)
	assert.Positive(t, d.RetryAfter)
}

// carryOverFull: rule 3 on the real clock, which a limiter that decides
// on a clock the suite cannot step (a server's) runs too. A bucket not full
// keeps its balance, clamped to the new capacity (on slow limits, so the
// counts are exact). A bucket full under its old limit is full under the
// new one, as a Name never used is, whether a clamp or the refill made it
// full, alone on its key or beside a limit that is not full (which keeps
// the key, and with it the full bucket's state, held): a limiter may forget
// a full bucket at any time, so any other answer would make a client's
// balance depend on whether it had.
func (s policySuite) carryOverFull(t *testing.T) {
	l := s.limiter(t)
	x := lim("x", 10, slow)
	require.True(t, allowL(t, l, "k", 7, x).Allowed) // 3 left
	d := allowL(t, l, "k", 0, lim("x", 20, slow))
	assert.Equal(t, int64(3), d.Remaining, "not full: the balance carries to a larger capacity")
	assert.Equal(t, int64(20), d.Limit)
	assert.Positive(t, d.ResetAfter)
	d = allowL(t, l, "k", 0, lim("x", 2, slow))
	assert.Equal(t, int64(2), d.Remaining, "3 clamped to capacity 2")
	assert.Zero(t, d.ResetAfter, "full at capacity 2")
	d = allowL(t, l, "k", 0, x)
	assert.Equal(t, int64(10), d.Remaining, "full at capacity 2, full at 10")
	assert.Zero(t, d.ResetAfter)
	assert.True(t, allowL(t, l, "k", 10, x).Allowed)
	assert.False(t, allowL(t, l, "k", 1, x).Allowed, "exactly 10 were there")

	fast, other := lim("f", 10, 1e4), lim("y", 10, slow) // f refills 10 tokens in 1 ms
	big := lim("f", 20, slow)
	for _, beside := range []bool{false, true} {
		key := fmt.Sprint("refilled-", beside)
		limits := []admit.Limit{fast}
		if beside {
			limits = append(limits, other)
		}
		require.True(t, allowL(t, l, key, 6, limits...).Allowed) // f 4, y 4
		awaitFull(t, l, key, fast)
		d := allowL(t, l, key, 0, big)
		assert.Equal(t, int64(20), d.Remaining, "beside y: %v; full at capacity 10, full at 20", beside)
		assert.Zero(t, d.ResetAfter, "beside y: %v", beside)
		require.True(t, allowL(t, l, key, 20, big).Allowed, "beside y: %v", beside)
		assert.False(t, allowL(t, l, key, 1, big).Allowed, "beside y: %v; exactly 20 were there", beside)
		if beside {
			assert.Equal(t, int64(4), allowL(t, l, key, 0, other).Remaining, "y kept its balance")
		}
	}
}

// awaitFull peeks at key under lm until the peek finds it full, sleeping
// the ResetAfter each peek reports.
func awaitFull(t *testing.T, l admit.PolicyLimiter, key string, lm admit.Limit) {
	t.Helper()
	for range 1000 {
		d := allowL(t, l, key, 0, lm)
		if d.ResetAfter == 0 {
			require.Equal(t, lm.Capacity, d.Remaining, "a peek with ResetAfter 0 at %q", key)
			return
		}
		time.Sleep(d.ResetAfter)
	}
	t.Fatalf("%q never full under %v", key, lm)
}

// storm: goroutines on the real clock share keys under two limits at rates
// that refill during the test; per key, what was admitted stays within
// each limit's bound, capacity + rate × elapsed + 1.
func (s policySuite) storm(t *testing.T) {
	l := s.limiter(t)
	burst, sustained := lim("burst", 5, 200), lim("sustained", 20, 50)
	const keys, g = 4, 16
	var admitted [keys]atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	var failed atomic.Value
	begin := time.Now()
	for i := range g {
		wg.Go(func() {
			ctx := context.Background()
			k := i % keys
			for !stop.Load() {
				d, err := l.AllowLimits(ctx, fmt.Sprint("storm-", k), 1, burst, sustained)
				if err != nil {
					failed.Store(err)
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // how long to storm, not an assertion
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(begin).Seconds()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	for k := range admitted {
		n := admitted[k].Load()
		assert.Positive(t, n, "key %d", k)
		for _, lm := range []admit.Limit{burst, sustained} {
			bound := float64(lm.Capacity) + lm.Rate*elapsed + 1
			assert.LessOrEqual(t, float64(n), bound, "key %d, limit %s: admitted over %.3f s", k, lm.Name, elapsed)
		}
	}
}

// fakePolicy returns a limiter on a new FakeClock reading start.
func (s policySuite) fakePolicy(t *testing.T) (admit.PolicyLimiter, *buckettest.FakeClock) {
	t.Helper()
	clk := buckettest.NewFakeClock(start)
	return s.limiter(t, admit.WithClock(clk)), clk
}

// exactRetryAfter: denied, RetryAfter is the exact time until every limit
// holds n; a call that waits a nanosecond less is denied, one that waits
// exactly that long is allowed; Policy is the limit that needs the longest.
func (s policySuite) exactRetryAfter(t *testing.T) {
	l, clk := s.fakePolicy(t)
	burst, slowL := lim("burst", 2, 1), lim("slow", 4, 0.5)
	require.True(t, allowL(t, l, "k", 2, burst, slowL).Allowed) // burst 0, slow 2
	d := allowL(t, l, "k", 2, burst, slowL)
	require.False(t, d.Allowed)
	assert.Equal(t, 2*time.Second, d.RetryAfter, "burst needs 2 tokens at 1/s; slow holds 2")
	assert.Equal(t, "burst", d.Policy)
	assert.Equal(t, int64(2), d.Limit)
	assert.Zero(t, d.Remaining)
	assert.Equal(t, 4*time.Second, d.ResetAfter, "slow is full after 2 tokens at 0.5/s")
	clk.Advance(2*time.Second - 1)
	d = allowL(t, l, "k", 2, burst, slowL)
	require.False(t, d.Allowed, "a nanosecond early")
	assert.Equal(t, time.Duration(1), d.RetryAfter)
	clk.Advance(1)
	d = allowL(t, l, "k", 2, burst, slowL)
	require.True(t, d.Allowed, "exactly at RetryAfter") // burst 0, slow 1 (+1 refilled over 2 s, −2)
	assert.Equal(t, "burst", d.Policy)
	clk.Advance(time.Second)
	d = allowL(t, l, "k", 2, burst, slowL)
	require.False(t, d.Allowed)
	assert.Equal(t, time.Second, d.RetryAfter, "burst holds 1 and needs 1 s; slow holds 1.5 and needs 1 s")
	d = allowL(t, l, "k", 2, lim("burst", 2, 10), slowL)
	require.False(t, d.Allowed)
	assert.Equal(t, "slow", d.Policy, "burst, carried over at 10/s, needs 0.1 s; slow needs 1 s")
	assert.Equal(t, time.Second, d.RetryAfter)
	assert.Equal(t, int64(4), d.Limit)
	assert.Equal(t, int64(1), d.Remaining, "slow's 1.5 tokens, whole")
}

// carryOver: rule 3. A call that brings another Capacity or Rate for a Name
// the key holds carries its balance over: advanced at the old rate, then
// clamped to the new capacity. A bucket full under its old limit is full
// under the new one, so that a client's balance never depends on whether
// its full bucket was kept or forgotten (a full bucket equals a Name never
// used, and a limiter may drop it at any time, for other keys' traffic).
func (s policySuite) carryOver(t *testing.T) {
	l, clk := s.fakePolicy(t)
	x := lim("x", 10, 1)
	require.True(t, allowL(t, l, "k", 6, x).Allowed) // 4 left
	d := allowL(t, l, "k", 0, lim("x", 5, 1))
	assert.Equal(t, int64(4), d.Remaining, "4 fits the new capacity 5")
	assert.Equal(t, int64(5), d.Limit)
	clk.Advance(500 * time.Millisecond)
	d = allowL(t, l, "k", 0, lim("x", 3, 1))
	assert.Equal(t, int64(3), d.Remaining, "4.5 advanced at the old rate, clamped to 3")
	assert.Zero(t, d.ResetAfter, "full at the new capacity")
	d = allowL(t, l, "k", 0, x)
	assert.Equal(t, int64(10), d.Remaining, "full at capacity 3, full at capacity 10: as a key never seen")
	assert.Zero(t, d.ResetAfter)
	require.True(t, allowL(t, l, "k", 7, x).Allowed) // 3 left
	d = allowL(t, l, "k", 0, lim("x", 20, 1))
	assert.Equal(t, int64(3), d.Remaining, "a bucket not full keeps its balance under a larger capacity")
	assert.Equal(t, 17*time.Second, d.ResetAfter)
	d = allowL(t, l, "k", 0, x)
	assert.Equal(t, int64(3), d.Remaining)
	assert.Equal(t, 7*time.Second, d.ResetAfter)
	require.True(t, allowL(t, l, "k", 3, x).Allowed) // 0 left
	clk.Advance(time.Second)
	d = allowL(t, l, "k", 0, lim("x", 10, 2))
	assert.Equal(t, int64(1), d.Remaining, "1 s at the old rate 1/s, then the new rate")
	clk.Advance(time.Second)
	d = allowL(t, l, "k", 0, lim("x", 10, 2))
	assert.Equal(t, int64(3), d.Remaining, "one more second at 2/s")
	clk.Advance(500 * time.Millisecond)
	d = allowL(t, l, "k", 0, lim("x", 10, 0.5))
	assert.Equal(t, int64(4), d.Remaining, "half a second at 2/s, then the slower rate")
	clk.Advance(2 * time.Second)
	d = allowL(t, l, "k", 0, lim("x", 10, 0.5))
	assert.Equal(t, int64(5), d.Remaining, "two seconds at 0.5/s")
	assert.Equal(t, 10*time.Second, d.ResetAfter, "5 tokens at 0.5/s")
	// An unchanged limit does not carry anything: a different Name is a
	// different bucket.
	d = allowL(t, l, "k", 0, lim("y", 10, 2))
	assert.Equal(t, int64(10), d.Remaining)
}
