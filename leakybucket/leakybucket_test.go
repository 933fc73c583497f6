package leakybucket_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/leakybucket"
	"github.com/admit-go/admit/windowtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// alg runs the windowed suite with the queue bound at limit and the leak
// at limit per window.
var alg = windowtest.Algorithm{
	New: func(limit int64, window time.Duration, opts ...admit.Option) (admit.Limiter, error) {
		return leakybucket.New(limit, float64(limit)/window.Seconds(), opts...)
	},
	Bound:     windowtest.PacedBound,
	RateBased: true,
	MovesUp:   true,
}

func TestConformance(t *testing.T) { windowtest.Run(t, alg) }

func FuzzModel(f *testing.F) { windowtest.Fuzz(f, alg) }

func TestInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
		mention  string
	}{
		{0, 1, "0"},
		{1, 0, "0"},
		{1, -1, "-1"},
		{1, math.NaN(), "NaN"},
		{1, math.Inf(1), "+Inf"},
		{1, 2e9, "2e+09"},
	} {
		_, err := leakybucket.New(tc.capacity, tc.rate)
		require.ErrorIs(t, err, admit.ErrInvalidConfig, "New(%d, %v)", tc.capacity, tc.rate)
		assert.Contains(t, err.Error(), tc.mention)
	}
}

// TestSpacing: a caller asking at every nanosecond step is admitted exactly
// once per 1/rate, fractional rates included, and never twice in a period.
func TestSpacing(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		want []int64 // the first admissions, ns after the start
	}{
		{2, []int64{0, 500_000_000, 1_000_000_000, 1_500_000_000}},
		{3, []int64{0, 333_333_334, 666_666_667, 1_000_000_000, 1_333_333_334}},
		{1e9, []int64{0, 1, 2, 3}},
	} {
		t.Run(fmt.Sprintf("rate=%v", tc.rate), func(t *testing.T) {
			clk := buckettest.NewFakeClock(0)
			b, err := leakybucket.New(10, tc.rate, admit.WithClock(clk))
			require.NoError(t, err)
			var got []int64
			for len(got) < len(tc.want) {
				if b.TryAcquire() {
					got = append(got, clk.Now())
					assert.False(t, b.TryAcquire(), "no burst: one per instant")
				}
				// Jump close to the next due time, then step by 1 ns.
				if len(got) > 0 && clk.Now() < got[len(got)-1]+int64(1e9/tc.rate)-2 {
					clk.Set(got[len(got)-1] + int64(1e9/tc.rate) - 2)
				} else {
					clk.Advance(1)
				}
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestQueueBound: capacity callers may wait; the next is rejected at once
// with ErrQueueFull, without sleeping; they leave 1/rate apart.
func TestQueueBound(t *testing.T) {
	const capacity = 3
	clk := buckettest.NewFakeClock(0)
	b, err := leakybucket.New(capacity, 10, admit.WithClock(clk))
	require.NoError(t, err)
	require.True(t, b.TryAcquire())
	done := make(chan error, capacity)
	for i := range capacity {
		go func() { done <- b.Acquire(context.Background()) }()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		require.NoError(t, clk.WaitForSleepers(ctx, i+1))
		cancel()
	}
	err = b.Acquire(context.Background())
	require.ErrorIs(t, err, admit.ErrQueueFull)
	assert.Contains(t, err.Error(), "3")
	assert.Equal(t, capacity, clk.Sleepers(), "rejected at once, not queued")
	assert.False(t, b.TryAcquire())
	for k := 1; k <= capacity; k++ {
		wake, ok := clk.NextWake()
		require.True(t, ok)
		assert.Equal(t, int64(k)*int64(100*time.Millisecond), wake, "waiter %d leaves %d periods after the first", k, k)
		clk.Set(wake)
		require.NoError(t, <-done)
		assert.False(t, b.TryAcquire(), "no one overtakes, and the slot is used")
	}
	clk.Advance(100 * time.Millisecond)
	assert.True(t, b.TryAcquire(), "the queue has drained")
}

// TestRequestOfN: a request of n leaves as one admission and holds the
// outlet for n/rate.
func TestRequestOfN(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := leakybucket.New(5, 10, admit.WithClock(clk))
	require.NoError(t, err)
	require.True(t, b.TryAcquireN(4))
	clk.Advance(399 * time.Millisecond)
	assert.False(t, b.TryAcquire())
	clk.Advance(time.Millisecond)
	assert.True(t, b.TryAcquire())
	assert.False(t, b.TryAcquireN(6), "n above the capacity")
}
