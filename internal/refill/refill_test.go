package refill

import (
	"context"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
)

func TestNewParamsUnits(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
		shift    uint
	}{
		{1, 1e9, 0},      // a unit is a token: 1 unit/ns
		{1, 1, 29},       // 2^29/1e9 ≈ 0.54 units/ns
		{1, 1e5, 13},     // 2^13·1e5/1e9 ≈ 0.82 units/ns
		{1, 0, 60},       // rate 0: only the capacity limits k
		{1e9, 1e-6, 31},  // the capacity limits k: 1e9 < 2^30
		{1 << 60, 1, 0},  // the largest capacity
		{3, 3, 28},       // 2^28·3/1e9 ≈ 0.81
		{1, 1e-6, 49},    // 2^49·1e-6/1e9 ≈ 0.56
		{100, 1e-6, 49},  // 100 < 2^7, so k could be 54, but the rate caps it
		{1e9, 1e9, 0},    // both extremes of the required range
		{1e9, 0.5, 30},   // 2^30·0.5/1e9 ≈ 0.54
		{7, 1.0 / 3, 31}, // 2^31/3/1e9 ≈ 0.72
	} {
		p, err := NewParams(tc.capacity, tc.rate)
		require.NoError(t, err, "NewParams(%d, %v)", tc.capacity, tc.rate)
		assert.Equal(t, tc.shift, p.Shift, "NewParams(%d, %v)", tc.capacity, tc.rate)
		assert.Equal(t, tc.capacity<<tc.shift, p.Cap)
		assert.Less(t, p.Cap, int64(1)<<62)
		if tc.rate > 0 {
			perNs := float64(p.w) + float64(p.f)/(1<<64)
			assert.LessOrEqual(t, perNs, 1.0, "V stays below the horizon")
			// f carries at least 32 significant bits (NewParams refuses
			// fewer), so the rate is represented to within 2^-32.
			assert.InEpsilon(t, tc.rate*math.Ldexp(1, int(tc.shift))/1e9, perNs, 0x1p-32)
		}
	}
}

func TestNewParamsErrors(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
	}{
		{0, 1}, {-5, 1}, {1 << 61, 1}, {math.MaxInt64, 1},
		{1, -1}, {1, math.NaN()}, {1, math.Inf(1)}, {1, math.Inf(-1)},
		{1, 1.5e9}, {1, 2e9}, {1, 1e300}, {1, 5e-324}, {1e9, 1e-15},
	} {
		_, err := NewParams(tc.capacity, tc.rate)
		assert.ErrorIs(t, err, admit.ErrInvalidConfig, "NewParams(%d, %v)", tc.capacity, tc.rate)
	}
}

// TestVExact checks V against exact big-number arithmetic: never below the
// exact floor, at most one unit above it, and equal where the exact value is
// whole.
func TestVExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, rate := range []float64{1e-6, 1.0 / 3, 0.5, 1, 3, 7.3, 1e5, 123456.789, 1e9} {
		p, err := NewParams(10, rate)
		require.NoError(t, err)
		for range 2000 {
			tt := r.Int64N(Horizon)
			v := p.V(tt)
			want := ratFloor(rate, p.Shift, tt)
			d := v - want
			require.True(t, d == 0 || d == 1, "rate %v, t %d: V=%d, exact floor %d", rate, tt, v, want)
		}
		// Whole seconds at whole-token rates give whole tokens.
		if rate == math.Trunc(rate) {
			for s := int64(1); s < 1000; s += 37 {
				assert.Equal(t, int64(rate)*s<<p.Shift, p.V(s*1e9), "rate %v, %d s", rate, s)
			}
		}
	}
}

func TestVMonotone(t *testing.T) {
	p, err := NewParams(1, 1.0/3)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(3, 4))
	for range 10_000 {
		a := r.Int64N(Horizon)
		b := a + r.Int64N(1000)
		require.LessOrEqual(t, p.V(a), p.V(min(b, Horizon)))
	}
	assert.Equal(t, int64(0), p.V(0))
	assert.Greater(t, p.V(Horizon), int64(0))
}

func TestWhen(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, rate := range []float64{1e-6, 1.0 / 3, 1, 1e5, 1e9} {
		p, err := NewParams(5, rate)
		require.NoError(t, err)
		for range 500 {
			from := r.Int64N(Horizon / 2)
			v := p.V(from) + r.Int64N(p.Cap)
			at := p.When(from, v)
			require.GreaterOrEqual(t, at, from)
			if at <= Horizon {
				require.GreaterOrEqual(t, p.V(at), v, "V(When) reaches v")
				if at > from {
					require.Less(t, p.V(at-1), v, "and no earlier time does")
				}
			}
		}
	}
	z, err := NewParams(5, 0)
	require.NoError(t, err)
	assert.Equal(t, Horizon+1, z.When(0, 1), "rate 0 never reaches more")
	assert.Equal(t, int64(7), z.When(7, 0))
}

func TestRefill(t *testing.T) {
	p, err := NewParams(2, 1)
	require.NoError(t, err)
	one := p.Units(1)
	bal, at := p.Refill(0, 10*second, 5*second)
	assert.Equal(t, [2]int64{0, 10 * second}, [2]int64{bal, at}, "a stale reading adds nothing and keeps last")
	bal, at = p.Refill(0, 10*second, 11*second)
	assert.Equal(t, [2]int64{one, 11 * second}, [2]int64{bal, at})
	bal, _ = p.Refill(one, 0, Horizon)
	assert.Equal(t, p.Cap, bal, "clamped, with no overflow")
}

const second = int64(time.Second)

// ratFloor is ⌊t · rate · 2^shift / 1e9⌋ in exact arithmetic, with the rate
// read as its shortest decimal form.
func ratFloor(rate float64, shift uint, t int64) int64 {
	r, _ := new(big.Rat).SetString(strconv.FormatFloat(rate, 'g', -1, 64))
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(t), shift)))
	r.Quo(r, big.NewRat(1e9, 1))
	return new(big.Int).Quo(r.Num(), r.Denom()).Int64()
}

func TestClock(t *testing.T) {
	f := &stepClock{now: 100}
	c := NewClock(f)
	assert.Equal(t, int64(0), c.Now())
	f.now = 150
	assert.Equal(t, int64(50), c.Now())
	f.now = 99
	assert.Equal(t, int64(0), c.Now(), "before the origin reads as the origin")
	f.now = math.MinInt64
	assert.Equal(t, int64(0), c.Now())
	f.now = math.MaxInt64
	assert.Equal(t, Horizon, c.Now(), "past the horizon reads as the horizon")

	neg := &stepClock{now: math.MinInt64}
	c = NewClock(neg)
	neg.now = math.MaxInt64
	assert.Equal(t, Horizon, c.Now(), "no overflow across the whole int64 range")

	sys := NewClock(nil)
	assert.GreaterOrEqual(t, sys.Now(), int64(0))
	assert.Nil(t, NewClock(admit.SystemClock()).c, "the system clock is called directly")
}

type stepClock struct{ now int64 }

func (c *stepClock) Now() int64                                       { return c.now }
func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error { return ctx.Err() }

// TestFresh: Fresh reads an injected clock as Now does (clamped alike),
// and on the system clock, counter or not, is never behind a Now taken
// before it, in the same goroutine or another one that handed its reading
// over through memory (what keyed's conversions and evictions rely on).
func TestFresh(t *testing.T) {
	f := &stepClock{now: 100}
	c := NewCounterClock(f)
	for _, now := range []int64{150, 99, math.MinInt64, math.MaxInt64} {
		f.now = now
		assert.Equal(t, c.Now(), c.Fresh(), "reading %d", now)
	}
	for _, sys := range []Clock{NewClock(nil), NewCounterClock(nil)} {
		var last atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 200_000 {
				last.Store(sys.Now())
			}
		}()
	loop:
		for {
			select {
			case <-done:
				break loop
			default:
			}
			a := last.Load()
			b := sys.Now()
			if fr := sys.Fresh(); fr < a || fr < b {
				t.Fatalf("counter %v: Fresh %d is behind a reading taken before it (%d here, %d in another goroutine)", sys.Counter(), fr, b, a)
			}
		}
	}
}
