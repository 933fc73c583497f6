package rate

// The test names here avoid those of x/time/rate's rate_test.go, which
// make test adds to this package (see testdata/xtime.sh).

import (
	"context"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	xrate "golang.org/x/time/rate"

	"github.com/admit-go/admit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRatioReadsTheRateExactly(t *testing.T) {
	pow := func(e int) uint64 { return uint64(math.Pow10(e)) }
	for _, tc := range []struct {
		l        Limit
		num, den uint64
		fill     bool
	}{
		{10, 10 * pow(10), pow(19), false},
		{0.1, pow(9), pow(19), false},      // exactly 1/10 per second, not the float
		{1e-10, 1, pow(19), false},         // x/time's TestTinyLimit rate
		{1e9, pow(19), pow(19), false},     // one per nanosecond
		{2e9, 2 * pow(18), pow(18), false}, // too large for den 10^19
		{Every(3 * time.Second), 1, 3 * pow(9), false},
		{Every(7), 1428571428571428700, pow(19), false},         // 1.4285714285714287e+08 has 8 decimals: read as written
		{Every(1300 * time.Millisecond), 1, 13 * pow(8), false}, // TestLimiter_noTruncationErrors' rate
		{0, 0, 1, false},
		{-1, 0, 1, false},
		{Limit(math.NaN()), 0, 1, false},
		{Inf, 0, 1, true},
		{Limit(math.Inf(1)), 0, 1, true},
		{1e30, 0, 1, true},
	} {
		num, den, fill := ratio(tc.l, 1)
		assert.Equal(t, [3]any{tc.num, tc.den, tc.fill}, [3]any{num, den, fill}, "ratio(%v)", tc.l)
	}
	// Otherwise the largest fraction with a 64-bit numerator and
	// denominator at or below the rate as written: within 2^-62 of it.
	l := Limit(0.12345678901234568) // 17 significant digits, not Every(d)
	num, den, _ := ratio(l, 1)
	exact := new(big.Rat).Quo(big.NewRat(12345678901234568, 1e17), big.NewRat(1e9, 1))
	got := new(big.Rat).SetFrac(new(big.Int).SetUint64(num), new(big.Int).SetUint64(den))
	assert.LessOrEqual(t, got.Cmp(exact), 0, "rounded up")
	assert.True(t, closeBelow(got, exact), "%v is not within 2^-62 of %v", got, exact)
	// A zero rate keeps the denominator, so the fraction survives.
	_, den, _ = ratio(0, 12345)
	assert.Equal(t, uint64(12345), den)
}

// TestLongRunExact: the exact long-run rate at fractional rates, where
// x/time/rate's float arithmetic drifts or rounds.
func TestLongRunExact(t *testing.T) {
	base := time.Now()
	for _, tc := range []struct {
		l     Limit
		step  time.Duration
		steps int
		want  int // admitted after draining the bucket: rate × steps × step
	}{
		{Every(3 * time.Second), time.Second, 300000, 100000},
		{1.0 / 3, time.Second, 300000, 100000}, // the float 1.0/3 is Every(3s): exactly 1/3
		{0.1, 100 * time.Millisecond, 200000, 2000},
		{1e-10, 1000 * time.Hour, 100, 0}, // 1e-10/s over 3.6e8 s is 0.036 token
		{7.25, time.Millisecond, 400000, 2900},
		{123.456789, time.Millisecond, 1000000, 123456},
	} {
		// Burst 10 is never reached (each step admits what there is), so
		// no refill is discarded and exactly rate × time is admitted.
		lim := NewLimiter(tc.l, 10)
		require.True(t, lim.AllowN(base, 10))
		got := 0
		for i := 1; i <= tc.steps; i++ {
			if lim.AllowN(base.Add(time.Duration(i)*tc.step), 1) {
				got++
			}
		}
		assert.Equal(t, tc.want, got, "rate %v, %d steps of %v", tc.l, tc.steps, tc.step)
	}
}

// TestImplicitTimeNeverMovesBack: the implicit-time methods apply a clock
// reading older than the limiter's latest as that latest time. x/time/rate
// moves its time back and refills the same interval again.
func TestImplicitTimeNeverMovesBack(t *testing.T) {
	future := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name string
		do   func(*Limiter)
		dox  func(*xrate.Limiter)
		want float64 // tokens at the future time afterwards
	}{
		{"Allow", func(l *Limiter) { l.Allow() }, func(l *xrate.Limiter) { l.Allow() }, 0},
		{"SetLimit", func(l *Limiter) { l.SetLimit(1) }, func(l *xrate.Limiter) { l.SetLimit(1) }, 1},
		{"SetBurst", func(l *Limiter) { l.SetBurst(2) }, func(l *xrate.Limiter) { l.SetBurst(2) }, 1},
		{"Reserve", func(l *Limiter) { l.Reserve() }, func(l *xrate.Limiter) { l.Reserve() }, 0},
		{"Wait", func(l *Limiter) { _ = l.WaitN(context.Background(), 0) }, func(l *xrate.Limiter) { _ = l.WaitN(context.Background(), 0) }, 1},
		{"Tokens", func(l *Limiter) { l.Tokens() }, func(l *xrate.Limiter) { l.Tokens() }, 1},
	} {
		lim, x := NewLimiter(1, 2), xrate.NewLimiter(1, 2)
		require.True(t, lim.AllowN(future, 1))
		require.True(t, x.AllowN(future, 1))
		tc.do(lim)
		tc.dox(x)
		assert.Equal(t, int64(future.Sub(epoch)), lim.last, "%s moved the limiter's time", tc.name)
		assert.Equal(t, tc.want, lim.TokensAt(future), "%s: tokens at the latest time", tc.name)
		if tc.name != "Tokens" {
			// x/time/rate's time went back to now, so the hour is
			// refilled again: the bucket is full.
			assert.Equal(t, 2.0, x.TokensAt(future), "%s: x/time/rate's documented behaviour changed", tc.name)
		}
	}
}

// TestStormNeverOverAdmits: many goroutines Allow on the real clock; the
// admitted count never exceeds burst + rate × elapsed (+1 for rounding).
func TestStormNeverOverAdmits(t *testing.T) {
	for _, tc := range []struct {
		r Limit
		b int
	}{{1e5, 10}, {1e6, 1000}, {1e3, 1}} {
		start := time.Now()
		lim := NewLimiter(tc.r, tc.b)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(30 * time.Millisecond)
		for range 16 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					for range 64 {
						if lim.Allow() {
							admitted.Add(1)
						}
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		bound := int64(float64(tc.b)+float64(tc.r)*elapsed.Seconds()) + 1
		assert.LessOrEqual(t, admitted.Load(), bound, "rate %v burst %d over %v", tc.r, tc.b, elapsed)
		assert.Positive(t, admitted.Load())
	}
}

// TestCancelRestoresAtMostItsTokens: x/time/rate's CancelAt restores
// tokens − limit·(lastEvent − timeToAct), more than the reservation took
// when a later reservation acts earlier. Here the limit is raised after R,
// so a later reservation acts 197 ms before R would have.
func TestCancelRestoresAtMostItsTokens(t *testing.T) {
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	lim, x := NewLimiter(10, 10), xrate.NewLimiter(10, 10)
	require.True(t, lim.AllowN(t0, 10))
	require.True(t, x.AllowN(t0, 10))
	r, xr := lim.ReserveN(t0, 2), x.ReserveN(t0, 2) // acts at t0+200ms
	require.Equal(t, 200*time.Millisecond, r.DelayFrom(t0))
	lim.SetLimitAt(t0, 1000)
	x.SetLimitAt(t0, 1000)
	r2, xr2 := lim.ReserveN(ms(2), 1), x.ReserveN(ms(2), 1) // acts at t0+3ms
	require.Equal(t, time.Millisecond, r2.DelayFrom(ms(2)))
	require.Equal(t, time.Millisecond, xr2.DelayFrom(ms(2)))
	r.CancelAt(ms(3))
	xr.CancelAt(ms(3))
	// Had R never been made: 0 at t0, 2 refilled by t0+2ms, 1 reserved,
	// 1 more refilled by t0+3ms: 2 tokens. This package holds 1: the limit
	// changed since R, so R gives back its tokens less every token
	// reserved after it (1), acted or not (TestCancelAfterLimitChange).
	assert.Equal(t, 1.0, lim.TokensAt(ms(3)))
	assert.InDelta(t, 3.97, x.TokensAt(ms(3)), 1e-9, "x/time/rate's documented behaviour changed")
}

// TestCancelInfReservation: a reservation made at Inf consumed nothing, so
// cancelling it after the limit became finite restores nothing; x/time/rate
// restores its tokens.
func TestCancelInfReservation(t *testing.T) {
	t0 := time.Now()
	lim, x := NewLimiter(Inf, 1), xrate.NewLimiter(xrate.Inf, 1)
	r, xr := lim.ReserveN(t0, 1), x.ReserveN(t0, 1)
	lim.SetLimitAt(t0, 1)
	x.SetLimitAt(t0, 1)
	require.True(t, lim.AllowN(t0, 1))
	require.True(t, x.AllowN(t0, 1))
	r.CancelAt(t0)
	xr.CancelAt(t0)
	assert.Zero(t, lim.TokensAt(t0))
	assert.Equal(t, 1.0, x.TokensAt(t0), "x/time/rate's documented behaviour changed")
}

func TestNegativeNIsRefused(t *testing.T) {
	t0 := time.Now()
	lim, x := NewLimiter(1, 3), xrate.NewLimiter(1, 3)
	require.True(t, lim.AllowN(t0, 3))
	require.True(t, x.AllowN(t0, 3))
	assert.False(t, lim.AllowN(t0, -2))
	assert.False(t, lim.ReserveN(t0, -2).OK())
	assert.Zero(t, lim.TokensAt(t0))
	assert.True(t, x.AllowN(t0, -2), "x/time/rate's behaviour changed")
	assert.Equal(t, 2.0, x.TokensAt(t0), "x/time/rate's behaviour changed")
	err := lim.WaitN(context.Background(), -1)
	assert.ErrorIs(t, err, admit.ErrUnsatisfiable)
	assert.EqualError(t, err, "rate: Wait(n=-1) is negative")
	// Inf counts nothing, so any n is allowed, as in x/time/rate.
	assert.True(t, NewLimiter(Inf, 0).AllowN(t0, -5))
}

// TestWaitErrors: x/time/rate's two error texts, word for word, and the
// admit sentinels for errors.Is; ctx.Err() unchanged.
func TestWaitErrors(t *testing.T) {
	lim, x := NewLimiter(Every(time.Hour), 3), xrate.NewLimiter(xrate.Every(time.Hour), 3)
	err, xerr := lim.WaitN(context.Background(), 4), x.WaitN(context.Background(), 4)
	require.Error(t, err)
	assert.EqualError(t, err, xerr.Error())
	assert.ErrorIs(t, err, admit.ErrUnsatisfiable)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)

	require.NoError(t, lim.WaitN(context.Background(), 3))
	require.NoError(t, x.WaitN(context.Background(), 3))
	// A token is an hour away; the deadline, 10 s, is not yet due.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err, xerr = lim.WaitN(ctx, 1), x.WaitN(ctx, 1)
	require.Error(t, err)
	assert.EqualError(t, err, xerr.Error())
	assert.ErrorIs(t, err, admit.ErrDeadline)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "as the buckets' AcquireN errors")
	assert.NotErrorIs(t, err, admit.ErrUnsatisfiable)
	assert.False(t, errors.Is(xerr, context.DeadlineExceeded), "x/time/rate's error changed")

	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	assert.Equal(t, context.Canceled, lim.Wait(done))
}

// TestWaitCancelGivesTokensBack: a waiter whose context ends gives its
// reservation back, so the next waiter does not queue behind it.
func TestWaitCancelGivesTokensBack(t *testing.T) {
	lim := NewLimiter(Every(time.Hour), 1) // the waiter waits an hour: only cancel ends it
	require.True(t, lim.Allow())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- lim.WaitN(ctx, 1) }()
	for lim.Tokens() > -0.5 { // the waiter has reserved
		time.Sleep(time.Millisecond)
	}
	cancel()
	require.Equal(t, context.Canceled, <-errc)
	assert.Greater(t, lim.Tokens(), -0.5)
}

// TestSameAsXTime: the zero value, Inf, burst 0 and zero limits behave as in
// x/time/rate, call for call.
func TestSameAsXTime(t *testing.T) {
	t0 := time.Now()
	var zero Limiter
	var xzero xrate.Limiter
	for _, tc := range []struct {
		name string
		l    *Limiter
		x    *xrate.Limiter
	}{
		{"zero value", &zero, &xzero},
		{"Inf burst 0", NewLimiter(Inf, 0), xrate.NewLimiter(xrate.Inf, 0)},
		{"burst 0", NewLimiter(10, 0), xrate.NewLimiter(10, 0)},
		{"limit 0", NewLimiter(0, 2), xrate.NewLimiter(0, 2)},
		{"Every(1s)", NewLimiter(Every(time.Second), 2), xrate.NewLimiter(xrate.Every(time.Second), 2)},
	} {
		for i, n := range []int{0, 1, 1, 2, 5, 0, 1} {
			ti := t0.Add(time.Duration(i) * 250 * time.Millisecond) // binary fractions of a second: x/time/rate's floats are exact here
			assert.Equal(t, tc.x.TokensAt(ti), tc.l.TokensAt(ti), "%s step %d TokensAt", tc.name, i)
			assert.Equal(t, tc.x.AllowN(ti, n), tc.l.AllowN(ti, n), "%s step %d AllowN(%d)", tc.name, i, n)
			xr, r := tc.x.ReserveN(ti, n), tc.l.ReserveN(ti, n)
			assert.Equal(t, xr.OK(), r.OK(), "%s step %d ReserveN(%d).OK", tc.name, i, n)
			assert.Equal(t, xr.DelayFrom(ti), r.DelayFrom(ti), "%s step %d ReserveN(%d).DelayFrom", tc.name, i, n)
		}
		assert.Equal(t, float64(tc.x.Limit()), float64(tc.l.Limit()))
		assert.Equal(t, tc.x.Burst(), tc.l.Burst())
	}
	assert.Equal(t, xrate.InfDuration, InfDuration)
	assert.Equal(t, float64(xrate.Inf), float64(Inf))
	for _, d := range []time.Duration{-1, 0, 1, 7, time.Millisecond, 3 * time.Second, math.MaxInt64} {
		assert.Equal(t, float64(xrate.Every(d)), float64(Every(d)), "Every(%v)", d)
	}
}

func TestAllocs(t *testing.T) {
	lim := NewLimiter(1e9, 1e9)
	now := time.Now()
	ctx := context.Background()
	assert.Zero(t, testing.AllocsPerRun(1000, func() { lim.Allow() }), "Allow")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { lim.AllowN(now, 1) }), "AllowN")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = lim.Wait(ctx) }), "Wait without waiting")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { lim.Tokens() }), "Tokens")
	empty := NewLimiter(1e-6, 1)
	empty.Allow()
	assert.Zero(t, testing.AllocsPerRun(1000, func() { empty.Allow() }), "Allow, rejected")
}

func TestSometimesConcurrent(t *testing.T) {
	s := Sometimes{Every: 10}
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 100 {
				s.Do(func() { ran.Add(1) })
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(100), ran.Load())
}

func TestErrorsAreNotXTimes(t *testing.T) {
	// The sentinels are an addition: x/time/rate's errors match none.
	xerr := xrate.NewLimiter(1, 1).WaitN(context.Background(), 2)
	assert.False(t, errors.Is(xerr, admit.ErrUnsatisfiable))
}

// TestReservationSize: a Reservation stays in x/time/rate's 64-byte size
// class, so Reserve allocates as much as x/time/rate's.
func TestReservationSize(t *testing.T) {
	const sizeClass = 64 // the runtime's size class that holds x/time/rate's
	require.LessOrEqual(t, unsafe.Sizeof(xrate.Reservation{}), uintptr(sizeClass))
	assert.LessOrEqual(t, unsafe.Sizeof(Reservation{}), uintptr(sizeClass))
	lim, now := NewLimiter(1e9, 1e9), time.Now()
	var keep *Reservation
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { keep = lim.ReserveN(now, 1) }))
	assert.True(t, keep.OK())
}

// TestAllow1MatchesReserve: Allow's written-out fast path decides and
// updates exactly as reserve(ts, 1, 0), Cancel's bookkeeping included, on sequences that visit its every
// branch (full, refilling, capped, short by less than a nanosecond's
// refill, short by more, zero and infinite rates, burst 0).
func TestAllow1MatchesReserve(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		l0, b0 := diffLimits[rng.IntN(len(diffLimits))], diffBursts[rng.IntN(len(diffBursts))]
		fast, ref := NewLimiter(l0, b0), NewLimiter(l0, b0)
		ts := int64(1e12)
		for step := range 60 {
			ts += int64(diffSteps[rng.IntN(len(diffSteps))])
			switch rng.IntN(5) {
			case 0:
				n := diffNs[rng.IntN(len(diffNs))]
				ok1, _ := fast.reserve(ts, n, InfDuration)
				ok2, _ := ref.reserve(ts, n, InfDuration)
				require.Equal(t, ok1, ok2)
			case 1:
				l := diffLimits[rng.IntN(len(diffLimits))]
				fast.setLimit(ts, l)
				ref.setLimit(ts, l)
			default:
				got := fast.allow1(max(ts, fast.last))
				want, _ := ref.reserve(max(ts, ref.last), 1, 0)
				require.Equal(t, want, got, "step %d: limit %v burst %d", step, fast.limit, fast.burst)
			}
			require.Equal(t, ref.tokens, fast.tokens, "step %d", step)
			require.Equal(t, ref.last, fast.last, "step %d", step)
			require.Equal(t, ref.lastEvent, fast.lastEvent, "step %d", step)
			require.Equal(t, ref.seq, fast.seq, "step %d: seq, which Cancel counts later tokens by", step)
			require.Equal(t, ref.gens, fast.gens, "step %d", step)
		}
	}
}

// TestCancelGivesBackOnce: a reservation gives its tokens back at most
// once. x/time/rate gives them back on every CancelAt: on a burst-2
// limiter, one 1-token reservation cancelled three times, with the bucket
// drained after each, lets 4 through at one instant.
func TestCancelGivesBackOnce(t *testing.T) {
	for _, implicit := range []bool{false, true} {
		// Implicit calls read the clock: every explicit time here is later
		// than any reading, so the limiter's time stays at ts throughout.
		ts := time.Now().Add(time.Hour)
		lim, x := NewLimiter(1e-6, 2), xrate.NewLimiter(1e-6, 2)
		r, xr := lim.ReserveN(ts, 1), x.ReserveN(ts, 1)
		require.True(t, r.OK())
		require.True(t, xr.OK())
		admitted, xadmitted := 0, 0 // r is cancelled below: it does not count
		for range 3 {
			for lim.AllowN(ts, 1) {
				admitted++
			}
			for x.AllowN(ts, 1) {
				xadmitted++
			}
			if implicit {
				r.Cancel()
			} else {
				r.CancelAt(ts)
			}
			xr.CancelAt(ts)
		}
		for lim.AllowN(ts, 1) {
			admitted++
		}
		for x.AllowN(ts, 1) {
			xadmitted++
		}
		assert.Equal(t, 2, admitted, "implicit %v: admitted at one instant with burst 2", implicit)
		assert.Equal(t, 4, xadmitted, "x/time/rate's behaviour changed")
	}
}

// TestCancelOnceConcurrent: concurrent cancels of one reservation give its
// tokens back once.
func TestCancelOnceConcurrent(t *testing.T) {
	t0 := time.Now()
	lim := NewLimiter(1e-6, 4)
	r := lim.ReserveN(t0, 4)
	require.True(t, r.OK())
	require.True(t, lim.ReserveN(t0, 1).OK()) // in debt by one, reserved after r
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { r.CancelAt(t0) })
	}
	wg.Wait()
	// r's 4 less the 1 reserved after it: −1 + 3.
	assert.Equal(t, 2.0, lim.TokensAt(t0))
}

// asWritten is l in tokens per nanosecond as the package doc reads it:
// exactly one per d ns if l is Every(d) for a whole d, else the shortest
// decimal that round-trips to l.
func asWritten(l Limit) *big.Rat {
	if d0 := int64(math.Round(1e9 / float64(l))); d0 >= 1 && d0 < 9e18 {
		for d := d0 - 1; d <= d0+1; d++ {
			if d >= 1 && Every(time.Duration(d)) == l {
				return big.NewRat(1, d)
			}
		}
	}
	x, ok := new(big.Rat).SetString(strconv.FormatFloat(float64(l), 'g', -1, 64))
	if !ok {
		panic(l)
	}
	return x.Quo(x, big.NewRat(1e9, 1))
}

// closeBelow reports whether got <= x and x − got < x·2^-62.
func closeBelow(got, x *big.Rat) bool {
	err := new(big.Rat).Sub(x, got)
	return err.Sign() >= 0 && err.Cmp(new(big.Rat).Mul(x, big.NewRat(1, 1<<62))) < 0
}

// TestRatioBelowIsBest: below finds the largest fraction at or below x
// within the bound, checked against every fraction for small bounds.
func TestRatioBelowIsBest(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 3000 {
		bound := int64(1 + rng.IntN(40))
		x := big.NewRat(1+rng.Int64N(1000*bound), 1+rng.Int64N(1000))
		if x.Cmp(big.NewRat(bound, 1)) > 0 {
			continue
		}
		bestN, bestD := int64(0), int64(1)
		for d := int64(1); d <= bound; d++ {
			for n := int64(1); n <= bound; n++ {
				if f := big.NewRat(n, d); f.Cmp(x) <= 0 && f.Cmp(big.NewRat(bestN, bestD)) > 0 {
					bestN, bestD = n, d
				}
			}
		}
		num, den := below(x, big.NewInt(bound))
		require.Zero(t, big.NewRat(bestN, bestD).Cmp(new(big.Rat).SetFrac64(int64(num), int64(den))),
			"below(%v, %d) = %d/%d, best %d/%d", x, bound, num, den, bestN, bestD)
	}
}

// TestRatioBelowIsClose: every rate that is neither a short decimal nor
// Every(d) is read to within 2^-62 of the rate as written, from below.
func TestRatioBelowIsClose(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 5000 {
		// Random rates from 1e-10/s to 1e18/s, with up to 17 digits.
		l := Limit(math.Pow(10, -10+28*rng.Float64()))
		if i%2 == 0 {
			l = Limit(float64(1+rng.Int64N(1e12)) * math.Pow10(-10-rng.IntN(8))) // 12 digits, small
		}
		num, den, fill := ratio(l, 1)
		require.False(t, fill)
		x := asWritten(l)
		got := new(big.Rat).SetFrac(new(big.Int).SetUint64(num), new(big.Int).SetUint64(den))
		require.True(t, closeBelow(got, x), "ratio(%v) = %d/%d", l, num, den)
	}
}

// TestDelayExact: delays at rates that no 64-bit decimal or Every(d) holds
// exactly are the exact delay, rounded down to a nanosecond, as at every
// other rate: checked in rational arithmetic against the rate as written,
// for the two rates the review found late (by 15.5 ms and 0.56 s per token
// when the rate was rounded to 2^-63 token/ns) and for random ones. A delay
// is never early, and the limiter allows the tokens at the delay, not a
// nanosecond before.
func TestDelayExact(t *testing.T) {
	t0 := time.Now()
	check := func(l Limit, b, n int, strict bool) {
		t.Helper()
		exact := new(big.Rat).Quo(new(big.Rat).SetInt64(int64(n)), asWritten(l)) // ns
		want := floorInt(exact)
		lim := NewLimiter(l, b)
		require.True(t, lim.AllowN(t0, b))
		got := int64(lim.ReserveN(t0, n).DelayFrom(t0))
		if strict {
			require.Equal(t, want, got, "rate %v, %d tokens", l, n)
		} else {
			// Exact unless the exact delay is within its 2^-61 relative
			// error of the next nanosecond.
			hi := floorInt(new(big.Rat).Mul(exact, new(big.Rat).Add(big.NewRat(1, 1), big.NewRat(1, 1<<61))))
			require.True(t, want <= got && got <= hi, "rate %v, %d tokens: delay %d, exact %s", l, n, got, exact.FloatString(3))
		}
		lim = NewLimiter(l, b)
		require.True(t, lim.AllowN(t0, b))
		require.False(t, lim.AllowN(t0.Add(time.Duration(got-1)), n), "rate %v: allowed before the delay", l)
		require.True(t, lim.AllowN(t0.Add(time.Duration(got)), n), "rate %v: not allowed at the delay", l)
	}
	for _, l := range []Limit{7.0 / 86400, 1.23456789012e-5} {
		_, den, _ := ratio(l, 1)
		require.NotEqual(t, uint64(1e19), den, "rate %v is a 64-bit decimal: not the case tested", l)
		for n := 1; n <= 5; n++ {
			check(l, 5, n, true)
		}
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for range 2000 {
		l := Limit(math.Pow(10, -4+12*rng.Float64()))
		b := 1 + rng.IntN(1000)
		check(l, b, 1+rng.IntN(b), false)
	}
}

// checkAxis checks the invariants of the time axis (axis.go).
func (lim *Limiter) checkAxis(t *testing.T) {
	t.Helper()
	lim.mu.Lock()
	defer lim.mu.Unlock()
	require.Equal(t, lim.axis != 0 || lim.lastFar || lim.eventFar, lim.odd, "odd")
	if lim.lastFar {
		x, ok := narrow(lim.lastW)
		require.True(t, !ok || x < -window, "lastFar with last %d in range", x)
	} else {
		require.True(t, lim.last == never || lim.last >= -window, "last %d", lim.last)
	}
	if lim.eventFar {
		_, ok := narrow(lim.eventW)
		require.False(t, ok, "eventFar with lastEvent in range")
	}
}
