package slidinglog_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/slidinglog"
	"github.com/admit-go/admit/windowtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var alg = windowtest.Algorithm{
	New: func(limit int64, window time.Duration, opts ...admit.Option) (admit.Limiter, error) {
		return slidinglog.New(limit, window, opts...)
	},
	Bound: windowtest.SlidingBound,
	Invalid: []windowtest.Invalid{
		{Limit: slidinglog.MaxLimit + 1, Window: time.Second, Mention: "16777217"},
		{Limit: math.MaxInt64, Window: time.Second, Mention: "9223372036854775807"},
		{Limit: 1, Window: 1<<60 + 1, Mention: "window"},
	},
}

func TestConformance(t *testing.T) { windowtest.Run(t, alg) }

func FuzzModel(f *testing.F) { windowtest.Fuzz(f, alg) }

// TestSteps is the exact behaviour on explicit fake-clock steps: an entry
// leaves the window exactly one window after it was admitted.
func TestSteps(t *testing.T) {
	clk := buckettest.NewFakeClock(1 << 40)
	l, err := slidinglog.New(3, time.Second, admit.WithClock(clk))
	require.NoError(t, err)
	for i, st := range []struct {
		advance time.Duration
		n       int64
		want    bool
		tokens  float64
	}{
		{0, 1, true, 2},                      // entries: 0
		{400 * time.Millisecond, 2, true, 0}, // 0, 0.4, 0.4
		{599_999_999, 1, false, 0},           // 0.999999999: the entry at 0 is still in the window
		{1, 1, true, 0},                      // 1.0: it has left; 0.4, 0.4, 1.0
		{399_999_999, 1, false, 0},
		{1, 2, true, 0}, // 1.4: both 0.4 entries left; 1.0, 1.4, 1.4
		{time.Hour, 3, true, 0},
	} {
		clk.Advance(st.advance)
		require.Equal(t, st.want, l.TryAcquireN(st.n), "step %d", i)
		assert.Equal(t, st.tokens, l.Tokens(), "step %d", i)
	}
}

// TestEveryWindowExact: a greedy caller at uneven steps gets exactly limit
// in every window that starts at an admission time, and never more.
func TestEveryWindowExact(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	const limit = 7
	l, err := slidinglog.New(limit, time.Second, admit.WithClock(clk))
	require.NoError(t, err)
	var at []int64
	for i := range 5000 {
		clk.Advance(time.Duration(1+i%13) * time.Millisecond)
		for l.TryAcquire() {
			at = append(at, clk.Now())
		}
	}
	j := 0
	for i := range at {
		for j < len(at) && at[j] < at[i]+int64(time.Second) {
			j++
		}
		if (i == 0 || at[i-1] < at[i]) && at[i]+int64(time.Second) <= clk.Now() {
			require.Equal(t, limit, j-i, "window starting at %v: exactly limit", time.Duration(at[i]))
		} else {
			require.LessOrEqual(t, j-i, limit, "window starting at %v", time.Duration(at[i]))
		}
	}
	assert.Greater(t, len(at), 30*limit, "about 35 s of greedy calls")
}

// TestWalk is the model-based walk: every decision, Tokens and wake against
// windowtest.LogModel over random interleavings of every operation.
func TestWalk(t *testing.T) { windowtest.Walk(t, alg, windowtest.LogModel{}, 1000) }

// TestWalkConcurrent checks the declared bound under contention on the fake
// clock, reservations cancelled while others take.
func TestWalkConcurrent(t *testing.T) { windowtest.WalkConcurrent(t, alg, 30) }
