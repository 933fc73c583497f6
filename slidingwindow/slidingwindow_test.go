package slidingwindow_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/slidingwindow"
	"github.com/admit-go/admit/windowtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var alg = windowtest.Algorithm{
	New: func(limit int64, window time.Duration, opts ...admit.Option) (admit.Limiter, error) {
		return slidingwindow.New(limit, window, opts...)
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

// TestSteps is the weighted estimate on explicit fake-clock steps.
func TestSteps(t *testing.T) {
	clk := buckettest.NewFakeClock(1 << 40)
	l, err := slidingwindow.New(4, time.Second, admit.WithClock(clk))
	require.NoError(t, err)
	for i, st := range []struct {
		advance time.Duration
		n       int64
		want    bool
		tokens  float64
	}{
		{0, 4, true, 0},
		{999_999_999, 1, false, 0},
		{1, 1, false, 0},                     // 1.0 s: previous 4 at weight 1
		{250 * time.Millisecond, 1, true, 0}, // 4 × 0.75 + 0 + 1 = 4
		{0, 1, false, 0},
		{250 * time.Millisecond, 1, true, 0}, // 4 × 0.5 + 1 + 1 = 4
		{500 * time.Millisecond, 2, true, 0}, // 2.0 s: previous 2 at weight 1, + 2 = 4
		{500 * time.Millisecond, 1, true, 0}, // 2 × 0.5 + 2 + 1 = 4
		{2 * time.Second, 4, true, 0},        // two windows on: both counts zero
		{1, 1, false, 0},                     // 4 × 0.999999999 + ...
	} {
		clk.Advance(st.advance)
		require.Equal(t, st.want, l.TryAcquireN(st.n), "step %d", i)
		assert.InDelta(t, st.tokens, l.Tokens(), 1e-6, "step %d", i)
	}
}

// TestAdversarial is the worst case the package doc states: limit at the
// last instant of one window, then a greedy caller through the next. The
// span of one window that starts at the burst sees close to 2 × limit, and
// never more than the declared 2 × limit.
func TestAdversarial(t *testing.T) {
	const limit = 100
	const w = int64(time.Second)
	clk := buckettest.NewFakeClock(0)
	l, err := slidingwindow.New(limit, time.Second, admit.WithClock(clk))
	require.NoError(t, err)
	clk.Set(w - 1)
	got := int64(0)
	for l.TryAcquire() {
		got++
	}
	require.Equal(t, int64(limit), got)
	for clk.Now() < 2*w-2 {
		clk.Advance(time.Millisecond)
		if clk.Now() >= 2*w-1 {
			break
		}
		for l.TryAcquire() {
			got++
		}
	}
	assert.LessOrEqual(t, got, int64(2*limit), "declared bound")
	assert.GreaterOrEqual(t, got, int64(2*limit-2), "the adversary gets within 2 of 2 × limit in one window")
	t.Logf("%d admitted in one window of limit %d", got, limit)
}

// TestWalk is the model-based walk: every decision, Tokens and wake against
// windowtest.CounterModel over random interleavings of every operation.
func TestWalk(t *testing.T) { windowtest.Walk(t, alg, windowtest.CounterModel{}, 1000) }

// TestWalkConcurrent checks the declared bound under contention on the fake
// clock, reservations cancelled while others take.
func TestWalkConcurrent(t *testing.T) { windowtest.WalkConcurrent(t, alg, 30) }

// TestTokensFloorAdmits: Tokens is limit minus the estimate, and the
// estimate is compared exactly by TryAcquireN; ⌊Tokens()⌋ must be what
// TryAcquireN admits at that instant, both ways:
//   - the previous window's weighted count is exactly 1 (3 × x / 3x), but
//     computed in float64 with x and 3x not representable it came out
//     above 1, so Tokens read 1.999… while TryAcquireN(2) admits;
//   - a limit of 2^40 with one admission in the previous window, read 1 ns
//     before it leaves the estimate: 2^40 − 1/w, whose float64 sum rounds
//     up to 2^40, which TryAcquireN refuses.
func TestTokensFloorAdmits(t *testing.T) {
	const x = 1<<58 + 63 // rounds up in float64
	for _, tc := range []struct {
		name         string
		limit, first int64
		w, at        int64 // the window, and the reading in window 1
	}{
		{"weight rounds up", 3, 3, 3 * x, 3*x + 2*x},
		{"sum rounds up", 1 << 40, 1, 1 << 59, 2<<59 - 1},
	} {
		clk := buckettest.NewFakeClock(0)
		l, err := slidingwindow.New(tc.limit, time.Duration(tc.w), admit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		if !l.TryAcquireN(tc.first) {
			t.Fatalf("%s: a new limiter refused %d", tc.name, tc.first)
		}
		clk.Set(tc.at)
		tok := l.Tokens()
		k := int64(math.Floor(tok))
		if k+1 <= tc.limit && l.TryAcquireN(k+1) {
			t.Fatalf("%s: Tokens() = %v, but TryAcquireN(%d) admitted", tc.name, tok, k+1)
		}
		if !l.TryAcquireN(k) {
			t.Fatalf("%s: Tokens() = %v, but TryAcquireN(%d) refused", tc.name, tok, k)
		}
	}
}
