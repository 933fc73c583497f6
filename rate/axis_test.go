package rate

import (
	"context"
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

// After the wall clock stepped (an NTP step, or a resume from suspend, where
// Linux's CLOCK_MONOTONIC stands still and the wall clock does not), a
// reservation made at a time without a monotonic reading must still tell its
// holder, in the holder's own time, how long to wait. since() shifts such a
// time by the step to put it on the monotonic axis; the Reservation's
// timeToAct must not carry that shift, or DelayFrom(t) is off by the step:
// after a resume of 10 s, five reservations at 1/s, burst 1, all report a
// delay of 0 and their holders act at once (x/time/rate: 0, 1, 2, 3, 4 s).
func TestWallStepReservationDelay(t *testing.T) {
	defer func(f func() int64) { wallStepNow = f; wallStep.Store(0) }(wallStepNow)
	for _, step := range []time.Duration{10 * time.Second, -10 * time.Second} {
		wallStepNow = func() int64 {
			return int64(time.Now().Round(0).Sub(epochWall)-time.Since(epoch)) + int64(step)
		}
		lim, x := NewLimiter(1, 1), xrate.NewLimiter(1, 1)
		now := time.Now().Round(0).Add(step) // what time.Now().UTC() reads after the step
		for i := range 5 {
			r, xr := lim.ReserveN(now, 1), x.ReserveN(now, 1)
			if got, want := r.DelayFrom(now), xr.DelayFrom(now); got != want {
				t.Errorf("wall clock stepped by %v: reservation %d: DelayFrom(t) = %v, x/time/rate %v", step, i, got, want)
			}
			if got, want := r.DelayFrom(now), time.Duration(i)*time.Second; got != want {
				t.Errorf("wall clock stepped by %v: reservation %d: DelayFrom(t) = %v, want %v", step, i, got, want)
			}
		}
		wallStep.Store(0)
	}
}

// A context deadline without a monotonic reading (context.WithDeadline on a
// calendar time, time.Now().UTC().Add(d)) is measured as since measures
// such times: with the wall clock's steps taken off. Otherwise, after the
// wall clock stepped forward by an hour, a wait of 1 s against a deadline
// 100 ms away reads 1 h 100 ms of room and waits, where x/time/rate's
// deadline.Sub(t) reads 100 ms and returns its deadline error at once.
func TestWallStepWaitDeadline(t *testing.T) {
	defer func(f func() int64) { wallStepNow = f; wallStep.Store(0) }(wallStepNow)
	// Only forward: the context's own timer reads the real wall clock, which
	// the test cannot step, so a deadline on a wall clock stepped back would
	// already have passed.
	for _, step := range []time.Duration{time.Hour} {
		wallStepNow = func() int64 {
			return int64(time.Now().Round(0).Sub(epochWall)-time.Since(epoch)) + int64(step)
		}
		now := time.Now().Round(0).Add(step) // what time.Now().UTC() reads after the step
		lim := NewLimiter(1, 1)
		if !lim.AllowN(now, 1) {
			t.Fatal("a full limiter refused")
		}
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(100*time.Millisecond))
		var asked time.Duration = -1
		err := lim.wait(ctx, 1, now, func(d time.Duration) (<-chan time.Time, func() bool, func()) {
			asked = d
			ch := make(chan time.Time, 1)
			ch <- now.Add(d)
			return ch, func() bool { return true }, func() {}
		})
		cancel()
		if err == nil || err.Error() != "rate: Wait(n=1) would exceed context deadline" {
			t.Errorf("wall clock stepped by %v: a wait of 1 s, deadline in 100 ms: err %v (timer asked for %v), want the deadline error", step, err, asked)
		}
		wallStep.Store(0)
	}
}

// An explicit time far from now (a corrupted or sentinel timestamp: the
// year 146 billion) holds the implicit-time methods at that time when it is
// ahead (they never move the limiter's time back), and is passed at once
// when it is behind. Every implicit-time call after it puts the limiter's
// far last update on the axis (timeOf), which took 2^29 additions of
// MaxInt64 ns under the lock before it was built in constant time: three
// Allow calls took 17.7 s (TestTimeOfExact checks the conversion).
func TestFarTimeThenAllow(t *testing.T) {
	for _, c := range []struct {
		far  time.Time
		want []bool
	}{
		{time.Unix(1<<62, 0), []bool{true, true, false}},
		{time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), []bool{true, true, false}},
		{time.Unix(-1<<62, 5), []bool{true, true, true}},
	} {
		lim := NewLimiter(1, 3)
		require.True(t, lim.AllowN(c.far, 1), "a full limiter refused at %v", c.far)
		for i, want := range c.want {
			assert.Equal(t, want, lim.Allow(), "Allow %d after AllowN at %v", i, c.far)
		}
	}
}

// timeOf gives the time at any offset on the axis exactly, far or near.
func TestTimeOfExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	origins := []time.Time{epoch, time.Unix(1<<61, 123), time.Unix(-1<<61, 999999999), time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i := range 2000 {
		lim := NewLimiter(1, 1)
		o := origins[i%len(origins)]
		if o != epoch {
			lim.axis, lim.base = 1, o
		}
		// A target time a random number of seconds and nanoseconds away,
		// within ±2^60 s.
		sec := rng.Int64N(1<<61) - 1<<60
		target := time.Unix(o.Unix()+sec, rng.Int64N(1e9))
		w := offset(target, lim.origin())
		got := lim.timeOf(w)
		if !got.Equal(target) || offset(got, lim.origin()) != w {
			t.Fatalf("origin %v, target %v: timeOf %v", o, target, got)
		}
	}
}
