package rate

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	xrate "golang.org/x/time/rate"
)

const year = 365 * 24 * time.Hour

// TestZeroTimeRefills: a limiter driven from the zero time.Time refills as
// x/time/rate's does. (With times clamped to 146 years around the
// process's start, every such time was one instant and nothing refilled.)
func TestZeroTimeRefills(t *testing.T) {
	z := time.Time{}
	lim, x := NewLimiter(1, 1), xrate.NewLimiter(1, 1)
	for i, step := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {500 * time.Millisecond, false}, {time.Second, true}, {time.Second, false}, {3 * time.Second, true}} {
		ti := z.Add(step.at)
		require.Equal(t, step.want, x.AllowN(ti, 1), "x/time/rate, step %d", i)
		assert.Equal(t, step.want, lim.AllowN(ti, 1), "step %d at %v", i, step.at)
	}
}

// TestEveryEraAlike: one sequence of explicit-time calls, run from origins
// in different eras (the zero time.Time, now, 150 years ahead, 200 years
// back, ...), gives the same results in each, and x/time/rate's (the rates
// and times are binary fractions, where its floats are exact).
func TestEveryEraAlike(t *testing.T) {
	now := time.Now()
	eras := []time.Time{now, {}, now.Add(150 * year), now.Add(-200 * year), time.Time{}.Add(100 * year), now.Add(290 * year), now.Round(0)}
	type result struct {
		ok     bool
		delay  time.Duration
		tokens float64
	}
	// ops are one limiter's calls: this package's or x/time/rate's.
	type ops struct {
		allowN   func(time.Time, int) bool
		reserveN func(time.Time, int) (ok bool, delay time.Duration, cancelAt func(time.Time))
		tokensAt func(time.Time) float64
	}
	mine := func() ops {
		lim := NewLimiter(2, 4)
		return ops{lim.AllowN, func(t time.Time, n int) (bool, time.Duration, func(time.Time)) {
			r := lim.ReserveN(t, n)
			return r.OK(), r.DelayFrom(t), r.CancelAt
		}, lim.TokensAt}
	}
	xtime := func() ops {
		lim := xrate.NewLimiter(2, 4)
		return ops{lim.AllowN, func(t time.Time, n int) (bool, time.Duration, func(time.Time)) {
			r := lim.ReserveN(t, n)
			return r.OK(), r.DelayFrom(t), r.CancelAt
		}, lim.TokensAt}
	}
	run := func(lim ops, origin time.Time) []result {
		var out []result
		var cancels []func(time.Time)
		cancelled := map[int]bool{}
		for i := range 40 {
			ti := origin.Add(time.Duration(i*i%37) * 125 * time.Millisecond) // forward and back
			var r result
			switch i % 5 {
			case 0, 1:
				r.ok = lim.allowN(ti, 1+i%3)
			case 2, 3:
				var cancel func(time.Time)
				r.ok, r.delay, cancel = lim.reserveN(ti, 1+i%4)
				cancels = append(cancels, cancel)
			case 4:
				if k := i % len(cancels); !cancelled[k] { // x/time/rate would give back again
					cancelled[k] = true
					cancels[k](ti)
				}
			}
			r.tokens = lim.tokensAt(ti)
			out = append(out, r)
		}
		return out
	}
	want := run(xtime(), now)
	for _, origin := range eras {
		assert.Equal(t, want, run(xtime(), origin), "x/time/rate from %v", origin)
		assert.Equal(t, want, run(mine(), origin), "from %v", origin)
	}
}

// TestFarGapSaturates: a gap between updates longer than time.Duration
// holds (292 years) refills what 2^63−1 ns refill, as x/time/rate's
// saturating time.Time.Sub does.
func TestFarGapSaturates(t *testing.T) {
	now := time.Now()
	lim, x := NewLimiter(1e-10, 2), xrate.NewLimiter(1e-10, 2)
	require.True(t, lim.AllowN(time.Time{}, 2))
	require.True(t, x.AllowN(time.Time{}, 2))
	// 2^63−1 ns at 1e-10 per second is 0.9223372036854775807 token, whatever
	// the gap beyond.
	want, _ := perE19(1<<63 - 1).Float64()
	for _, ti := range []time.Time{now, now.Add(-100 * year), now.Add(150 * year).Add(150 * year), time.Time{}.Add(150 * year).Add(150 * year)} {
		assert.Equal(t, want, lim.TokensAt(ti), "at %v", ti)
		assert.InDelta(t, want, x.TokensAt(ti), 1e-15, "x/time/rate at %v", ti)
		assert.False(t, lim.AllowN(ti, 1))
	}
	// A gap within time.Duration's range refills exactly that gap.
	require.True(t, lim.AllowN(now, 0)) // an update at now
	ti := now.Add(200 * year)
	gap := perE19(int64(ti.Sub(now)))
	gap.Add(gap, perE19(1<<63-1))
	wantGap, _ := gap.Float64()
	assert.InDelta(t, wantGap, lim.TokensAt(ti), 1e-15) // TokensAt's float64 rounds twice
	assert.False(t, lim.AllowN(ti, 2))
	assert.True(t, lim.AllowN(ti, 1))
}

// TestFarFutureStaysPut: after an explicit time centuries ahead, the
// implicit-time methods act at that time, not at the clock's reading: a
// stale reading adds nothing, on any axis.
func TestFarFutureStaysPut(t *testing.T) {
	for _, ahead := range []time.Duration{150 * year, 290 * year} {
		future := time.Now().Add(ahead)
		lim := NewLimiter(1, 3)
		require.True(t, lim.AllowN(future, 3))
		assert.False(t, lim.Allow())
		assert.False(t, lim.Reserve().DelayFrom(future) < time.Second, "a reservation at the clock's time")
		lim.SetLimit(1)
		lim.SetBurst(3)
		// Nothing refilled: the limiter's time is still the future one.
		assert.Equal(t, -1.0, lim.TokensAt(future))
		assert.Equal(t, 0.0, lim.TokensAt(future.Add(time.Second)))
	}
}

// perE19 is ns nanoseconds of refill at 1e-10 per second: ns/10^19 tokens.
func perE19(ns int64) *big.Rat {
	return new(big.Rat).SetFrac(big.NewInt(ns), new(big.Int).SetUint64(1e19))
}

// TestAxisImplicitMix: explicit times in far eras mixed with the
// implicit-time methods. The axis's invariants hold after every call, and
// no implicit-time call moves the limiter's time back.
func TestAxisImplicitMix(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	now := time.Now()
	eras := diffEras(now)
	for range 300 {
		lim := NewLimiter(diffLimits[rng.IntN(len(diffLimits))], diffBursts[rng.IntN(len(diffBursts))])
		var rs []*Reservation
		for range 40 {
			var before time.Time
			fresh := lim.last == never && !lim.lastFar
			if !fresh {
				before = lim.lastTime()
			}
			implicit := true
			switch rng.IntN(9) {
			case 0:
				lim.Allow()
			case 1:
				rs = append(rs, lim.Reserve())
			case 2:
				if len(rs) > 0 {
					rs[rng.IntN(len(rs))].Cancel()
				}
			case 3:
				lim.SetLimit(diffLimits[rng.IntN(len(diffLimits))])
			case 4:
				lim.Tokens()
			default:
				implicit = false
				ti := eras[rng.IntN(len(eras))].Add(time.Duration(rng.Int64N(int64(time.Hour))))
				switch rng.IntN(3) {
				case 0:
					lim.AllowN(ti, 1)
				case 1:
					rs = append(rs, lim.ReserveN(ti, 1))
				case 2:
					if len(rs) > 0 {
						rs[rng.IntN(len(rs))].CancelAt(ti)
					}
				}
			}
			lim.checkAxis(t)
			if implicit && !fresh && lim.last != never {
				require.False(t, lim.lastTime().Before(before), "an implicit-time call moved the limiter's time back from %v to %v", before, lim.lastTime())
			}
		}
	}
}

// TestWallStepMixedTimes: after the wall clock steps (NTP, a resume from
// suspend), a time without a monotonic reading (time.Now().UTC(), which
// reads the stepped wall clock) and Allow's monotonic reading stay on one
// axis, so alternating AllowN(time.Now().UTC(), 1) and Allow() admits no
// more than capacity + rate × elapsed + 1. The step, which a test cannot
// make on the system's clock, is simulated through wallStepNow. Before,
// wall-only times were measured on the wall clock and Allow's on the
// monotonic one: 5 s apart, each AllowN moved the limiter's time back 5 s
// (explicit times keep x/time/rate's rule) and the next Allow refilled
// them, 40 admissions in a few milliseconds at 10/s, burst 10.
func TestWallStepMixedTimes(t *testing.T) {
	defer func(f func() int64) { wallStepNow = f; wallStep.Store(0) }(wallStepNow)
	for _, delta := range []time.Duration{-5 * time.Second, 5 * time.Second} {
		measure := func() int64 { return int64(time.Now().Round(0).Sub(epochWall)-time.Since(epoch)) + int64(delta) }
		wallStepNow = measure
		lim := NewLimiter(10, 10)
		admitted := 0
		start := time.Now()
		for range 20 {
			wall := time.Now().Round(0).Add(delta) // what time.Now().UTC() reads after the step
			if lim.AllowN(wall, 1) {
				admitted++
			}
			if lim.Allow() {
				admitted++
			}
		}
		elapsed := time.Since(start)
		if bound := 10 + 10*elapsed.Seconds() + 1; float64(admitted) > bound {
			t.Errorf("wall clock stepped by %v: %d admitted in %v at 10/s, burst 10; bound %.1f", delta, admitted, elapsed, bound)
		}
		wallStep.Store(0)
	}
}
