package leakybucket_test

import (
	"context"
	"fmt"
	"math"
	"slices"
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

// sleepLog is a FakeClock that reports the deadline of every Sleep, in call
// order, before the sleeper is registered.
type sleepLog struct {
	*buckettest.FakeClock
	deadlines chan int64
}

func (c sleepLog) Sleep(ctx context.Context, d time.Duration) error {
	c.deadlines <- c.Now() + int64(d)
	return c.FakeClock.Sleep(ctx, d)
}

// next returns the next Sleep's deadline, or the result of done if that
// comes first (a hang guard, not a timing assertion).
func (c sleepLog) next(t *testing.T, done chan error) int64 {
	t.Helper()
	select {
	case d := <-c.deadlines:
		return d
	case err := <-done:
		t.Fatalf("returned instead of queueing: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no caller went to sleep")
	}
	return 0
}

// TestLeaveQueue: a waiter that gives up leaves the queue. With capacity 2
// and the first of two waiters cancelled, one caller is really waiting: a
// new Acquire queues instead of failing with ErrQueueFull, the waiter behind
// the cancelled one moves up into its slot and the newcomer takes the next,
// so the outlet never idles while a caller waits; with two waiting again,
// the queue is full.
func TestLeaveQueue(t *testing.T) {
	const second = int64(time.Second)
	clk := sleepLog{buckettest.NewFakeClock(0), make(chan int64, 16)}
	b, err := leakybucket.New(2, 1, admit.WithClock(clk))
	require.NoError(t, err)
	require.True(t, b.TryAcquire(), "the outlet is busy until 1 s")
	bg := context.Background()
	first, cancelFirst := context.WithCancel(bg)
	defer cancelFirst()
	a, c, d := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { a <- b.Acquire(first) }()
	require.Equal(t, 1*second, clk.next(t, a))
	go func() { c <- b.Acquire(bg) }()
	require.Equal(t, 2*second, clk.next(t, c))
	require.ErrorIs(t, b.Acquire(bg), admit.ErrQueueFull, "two waiting: full")

	cancelFirst()
	require.Equal(t, context.Canceled, <-a)
	go func() { d <- b.Acquire(bg) }()
	wakes := []int64{clk.next(t, d), clk.next(t, d)}
	slices.Sort(wakes)
	assert.Equal(t, []int64{1 * second, 2 * second}, wakes, "the second waiter moved up to 1 s, the newcomer queued at 2 s")
	hang, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	require.NoError(t, clk.WaitForSleepers(hang, 2))
	require.ErrorIs(t, b.Acquire(bg), admit.ErrQueueFull, "two waiting again: full")

	clk.Set(1 * second)
	require.NoError(t, <-c, "admitted in the cancelled waiter's slot")
	assert.False(t, b.TryAcquire(), "the newcomer holds the next slot")
	clk.Set(2 * second)
	require.NoError(t, <-d)
	assert.Equal(t, 0, clk.Sleepers())
}

// TestWalkConcurrent checks the declared bound under contention on the fake
// clock, reservations cancelled while others take.
func TestWalkConcurrent(t *testing.T) { windowtest.WalkConcurrent(t, alg, 30) }

// TestTokensRoom: Tokens is documented as "the room left in the queue". With
// capacity 2 at 1/s, the outlet busy and two callers queued, the queue is
// full (ErrQueueFull): the room left is 0, not negative.
func TestTokensRoom(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := leakybucket.New(2, 1, admit.WithClock(clk))
	require.NoError(t, err)
	require.True(t, b.TryAcquire())
	ws := buckettest.NewWaiters(b, clk)
	defer ws.Close()
	ws.Start(1)
	ws.Start(1)
	require.Equal(t, []int{0, 1}, ws.Pending(), "both callers queue")
	require.ErrorIs(t, b.Acquire(context.Background()), admit.ErrQueueFull)
	assert.GreaterOrEqual(t, b.Tokens(), 0.0, "the room left in a full queue")
}

// TestEarlyByOneUnit: a slot may open up to one unit of the stream before
// the exact n/rate after the admission before it, and a unit lasts under
// 2 ns only where the capacity allows units that fine. At capacity 1e9 and
// 1e-6 per second a unit is 2^-31 of a token, about 465,661 ns of leak: an
// admission at 465 µs, whose reading rounds down to 0, leaves the outlet
// free again at 10^15 − 20 ns (the rate rounded up to the unit's
// arithmetic adds the 20 ns), 465,020 ns before the exact 1/rate. The
// package doc said "at most 1 ns"; with T' the span plus 1 ns its bound
// would be ⌊1e-6/s × (10^15 − 465,020 + 1) ns⌋ + 1 = 1, and two are admitted.
// With T' the span plus the unit's 465,661 ns, it is 2.
func TestEarlyByOneUnit(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := leakybucket.New(1e9, 1e-6, admit.WithClock(clk))
	require.NoError(t, err)
	clk.Set(465_000)
	require.True(t, b.TryAcquire())
	clk.Set(1e15 - 21)
	assert.False(t, b.TryAcquire())
	clk.Set(1e15 - 20)
	assert.True(t, b.TryAcquire(), "free again at 10^15 − 20 ns, 465,020 ns before 1/rate after the first")
	// Where a unit lasts under 2 ns, at most 1 ns early: the doc's example.
	clk = buckettest.NewFakeClock(0)
	b, err = leakybucket.New(10, 1.0/3, admit.WithClock(clk))
	require.NoError(t, err)
	clk.Set(4)
	require.True(t, b.TryAcquire())
	clk.Set(3_000_000_002)
	assert.False(t, b.TryAcquire())
	clk.Set(3_000_000_003)
	assert.True(t, b.TryAcquire())
}
