package fixedwindow_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/fixedwindow"
	"github.com/admit-go/admit/slidinglog"
	"github.com/admit-go/admit/windowtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var alg = windowtest.Algorithm{
	New: func(limit int64, window time.Duration, opts ...admit.Option) (admit.Limiter, error) {
		return fixedwindow.New(limit, window, opts...)
	},
	Bound:   windowtest.AlignedBound,
	Aligned: true,
	Invalid: []windowtest.Invalid{
		{Limit: 1<<40 + 1, Window: time.Second, Mention: "1099511627777"},
		{Limit: math.MaxInt64, Window: time.Second, Mention: "9223372036854775807"},
		{Limit: 1, Window: 1<<60 + 1, Mention: "window"},
	},
}

func TestConformance(t *testing.T) { windowtest.Run(t, alg) }

func FuzzModel(f *testing.F) { windowtest.Fuzz(f, alg) }

// TestStraddle is the fixed window's boundary burst: limit in the last
// nanosecond of one window and limit in the first of the next, 2 × limit
// within 2 ns. The sliding log under the same calls admits only limit.
func TestStraddle(t *testing.T) {
	const limit, w = 5, time.Second
	for _, tc := range []struct {
		name string
		new  func(admit.Clock) (admit.Limiter, error)
		want int64
	}{
		{"fixedwindow", func(c admit.Clock) (admit.Limiter, error) { return fixedwindow.New(limit, w, admit.WithClock(c)) }, 2 * limit},
		{"slidinglog", func(c admit.Clock) (admit.Limiter, error) { return slidinglog.New(limit, w, admit.WithClock(c)) }, limit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := buckettest.NewFakeClock(0)
			l, err := tc.new(clk)
			require.NoError(t, err)
			clk.Set(int64(w) - 1)
			var got int64
			for l.TryAcquire() {
				got++
			}
			clk.Advance(1)
			for l.TryAcquire() {
				got++
			}
			assert.Equal(t, tc.want, got, "admitted within 2 ns across the boundary")
		})
	}
}

// TestSteps is the exact behaviour on explicit fake-clock steps.
func TestSteps(t *testing.T) {
	clk := buckettest.NewFakeClock(1 << 40)
	l, err := fixedwindow.New(3, time.Second, admit.WithClock(clk))
	require.NoError(t, err)
	for i, st := range []struct {
		advance time.Duration
		n       int64
		want    bool
		tokens  float64
	}{
		{0, 2, true, 1},
		{0, 2, false, 1},
		{999_999_999, 1, true, 0},
		{0, 1, false, 0},
		{1, 3, true, 0}, // a new window: the count starts again
		{2 * time.Second, 1, true, 2},
		{500 * time.Millisecond, 2, true, 0},
		{499_999_999, 1, false, 0},
		{1, 1, true, 2},
	} {
		clk.Advance(st.advance)
		require.Equal(t, st.want, l.TryAcquireN(st.n), "step %d", i)
		assert.Equal(t, st.tokens, l.Tokens(), "step %d", i)
	}
}

// TestWalk is the model-based walk: every decision, Tokens and wake against
// windowtest.FixedModel over random interleavings of every operation.
func TestWalk(t *testing.T) { windowtest.Walk(t, alg, windowtest.FixedModel{}, 1000) }

// TestWalkConcurrent checks the declared bound under contention on the fake
// clock, reservations cancelled while others take.
func TestWalkConcurrent(t *testing.T) { windowtest.WalkConcurrent(t, alg, 30) }
