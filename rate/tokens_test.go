package rate

import (
	"math"
	"testing"
	"time"

	xrate "golang.org/x/time/rate"
)

// TestTokensAtChangesNothing: TokensAt and Tokens, as in x/time/rate, only
// read. A limiter drained at t0 (burst 10, 1/s) takes a reservation R of 5
// (acts at t0+5s), the burst or limit is set again at t0 (a change: R's
// cancel goes through the peak bookkeeping), and R is cancelled at t0+1s.
// Reading the balance at t0+100s, or now (t0 is an hour ago), full at 10
// tokens, in between must not change what the cancel gives back: it used
// to raise the change's peak to that balance, which the limiter never
// reached, so the cancel gave back nothing (-4 tokens at t0+1s instead of
// 1, x/time/rate's answer too).
func TestTokensAtChangesNothing(t *testing.T) {
	t0 := time.Now().Add(-time.Hour)
	s := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	for _, tc := range []struct {
		name   string
		change func(lim *Limiter, x *xrate.Limiter)
	}{
		{"SetBurstAt", func(lim *Limiter, x *xrate.Limiter) { lim.SetBurstAt(s(0), 10); x.SetBurstAt(s(0), 10) }},
		{"SetLimitAt", func(lim *Limiter, x *xrate.Limiter) { lim.SetLimitAt(s(0), 1); x.SetLimitAt(s(0), 1) }},
	} {
		for _, rd := range []struct {
			name string
			read func(lim *Limiter, x *xrate.Limiter) (float64, float64)
		}{
			{"TokensAt", func(lim *Limiter, x *xrate.Limiter) (float64, float64) {
				return lim.TokensAt(s(100)), x.TokensAt(s(100))
			}},
			{"Tokens", func(lim *Limiter, x *xrate.Limiter) (float64, float64) { return lim.Tokens(), x.Tokens() }},
		} {
			t.Run(tc.name+"/"+rd.name, func(t *testing.T) {
				run := func(read bool) (float64, float64) {
					lim, x := NewLimiter(1, 10), xrate.NewLimiter(1, 10)
					if !lim.AllowN(s(0), 10) || !x.AllowN(s(0), 10) {
						t.Fatal("a full bucket refused its burst")
					}
					r, xr := lim.ReserveN(s(0), 5), x.ReserveN(s(0), 5)
					if !r.OK() || !xr.OK() || r.DelayFrom(s(0)) != 5*time.Second {
						t.Fatalf("ReserveN: ok %v, delay %v", r.OK(), r.DelayFrom(s(0)))
					}
					tc.change(lim, x)
					if read {
						if got, want := rd.read(lim, x); got != want || got != 10 {
							t.Errorf("%s = %v, x/time/rate %v, want 10", rd.name, got, want)
						}
					}
					r.CancelAt(s(1))
					xr.CancelAt(s(1))
					return lim.TokensAt(s(1)), x.TokensAt(s(1))
				}
				without, xWithout := run(false)
				with, xWith := run(true)
				t.Logf("after CancelAt(t0+1s): %v tokens without the %s read, %v with; x/time/rate %v and %v",
					without, rd.name, with, xWithout, xWith)
				if with != without {
					t.Errorf("%s changed what CancelAt gave back: %v tokens with it, %v without", rd.name, with, without)
				}
				if without != xWithout || xWith != xWithout {
					t.Errorf("%v tokens after the cancel, x/time/rate %v (with the read: %v)", without, xWithout, xWith)
				}
			})
		}
	}
}

// limiterState is what a pure read must leave as it was: the balance, its
// bounds and unit, and Cancel's bookkeeping. (The time axis is left out:
// TokensAt at a far time may move it, which re-expresses the times exactly
// and changes nothing observable; checkAxis checks that.)
type limiterState struct {
	tokens, capB, minB fixed
	den                uint64
	seq, changes       uint64
	gens               [genRing]gen
}

func (lim *Limiter) bookkeeping() limiterState {
	lim.mu.Lock()
	defer lim.mu.Unlock()
	return limiterState{lim.tokens, lim.capB, lim.minB, lim.den, lim.seq, lim.changes, lim.gens}
}

// TestZeroLimiterTokensChangesNothing: a zero Limiter reads 0 tokens, as
// x/time/rate's does, and the read leaves it as it was (it used to give it
// its denominator).
func TestZeroLimiterTokensChangesNothing(t *testing.T) {
	var lim Limiter
	var x xrate.Limiter
	before := lim.bookkeeping()
	if got, want := lim.TokensAt(time.Now()), x.TokensAt(time.Now()); got != 0 || want != 0 {
		t.Errorf("zero Limiter: TokensAt %v, x/time/rate %v, want 0", got, want)
	}
	if got := lim.Tokens(); got != 0 {
		t.Errorf("zero Limiter: Tokens %v, want 0", got)
	}
	if after := lim.bookkeeping(); after != before {
		t.Errorf("reading a zero Limiter changed it: %+v, before %+v", after, before)
	}
	if lim.Allow() || lim.AllowN(time.Now(), 1) {
		t.Error("a zero Limiter allowed an event")
	}
}

// TestRefusedCallChangesNothing: a call that updates nothing, as x/time/rate's
// change nothing (a refused AllowN, ReserveN or Allow, a CancelAt that gives
// nothing back), leaves the peak that a later CancelAt after a change of the
// limit or burst is held to as it was. Each raised it to the balance at its
// time, which the limiter never had: a later cancel gave back less (-4
// tokens instead of 1, or 0.5, or -5.9 instead of -3.9).
func TestRefusedCallChangesNothing(t *testing.T) {
	t0 := time.Now().Add(-time.Hour)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	// The limiter of 1/s drained at t0, R of 5 reserved behind it and the
	// burst set again; then the call, then R cancelled at t0+1s.
	for _, tc := range []struct {
		name  string
		burst int
		call  func(lim *Limiter, x *xrate.Limiter) (bool, bool)
	}{
		{"AllowN(t0+100s, 11)", 10, func(lim *Limiter, x *xrate.Limiter) (bool, bool) {
			return lim.AllowN(ms(100000), 11), x.AllowN(ms(100000), 11)
		}},
		{"ReserveN(t0+100s, 11)", 10, func(lim *Limiter, x *xrate.Limiter) (bool, bool) {
			return lim.ReserveN(ms(100000), 11).OK(), x.ReserveN(ms(100000), 11).OK()
		}},
		{"AllowN(t0+5.5s, 1)", 5, func(lim *Limiter, x *xrate.Limiter) (bool, bool) {
			return lim.AllowN(ms(5500), 1), x.AllowN(ms(5500), 1)
		}},
		// Allow reads now, an hour after t0: half a token (the limit is
		// lowered first so that R still waits then), refused.
		{"Allow()", 5, func(lim *Limiter, x *xrate.Limiter) (bool, bool) { return lim.Allow(), x.Allow() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(call bool) (float64, float64) {
				lim, x := NewLimiter(1, tc.burst), xrate.NewLimiter(1, tc.burst)
				lim.AllowN(ms(0), tc.burst)
				x.AllowN(ms(0), tc.burst)
				r, xr := lim.ReserveN(ms(0), 5), x.ReserveN(ms(0), 5)
				if tc.name == "Allow()" {
					// 5.5 tokens in an hour and a second: R acts after it.
					l := Limit(5.5 / 3601)
					lim.SetLimitAt(ms(0), l)
					x.SetLimitAt(ms(0), xrate.Limit(l))
				}
				lim.SetBurstAt(ms(0), tc.burst)
				x.SetBurstAt(ms(0), tc.burst)
				if call {
					if ok, xok := tc.call(lim, x); ok || xok {
						t.Fatalf("%s allowed: %v, x/time/rate %v", tc.name, ok, xok)
					}
				}
				r.CancelAt(ms(1000))
				xr.CancelAt(ms(1000))
				return lim.TokensAt(ms(1000)), x.TokensAt(ms(1000))
			}
			without, xWithout := run(false)
			with, xWith := run(true)
			t.Logf("after CancelAt(t0+1s): %v tokens without the call, %v with; x/time/rate %v and %v", without, with, xWithout, xWith)
			if with != without {
				t.Errorf("the refused %s changed what CancelAt gave back: %v tokens with it, %v without", tc.name, with, without)
			}
			if xWith != xWithout {
				t.Errorf("x/time/rate: %v with the call, %v without", xWith, xWithout)
			}
		})
	}
	// A CancelAt that gives nothing back: Ra of 2 and Rb of 3 reserved
	// behind a drained bucket of 10 at 1/s (acting at t0+2s and t0+5s), the
	// limit raised to 100/s, R2 of 1 reserved after. Cancelling Ra at t0+1s
	// (before it acts; the bucket would be full then) gives back nothing:
	// 3 + 1 tokens were reserved after its 2. Rb cancelled at t0+1ms gives
	// back 2 (its 3 less R2's 1), -5.9 + 2 tokens, with or without it.
	t.Run("CancelAt giving nothing back", func(t *testing.T) {
		run := func(cancelA bool) float64 {
			lim := NewLimiter(1, 10)
			lim.AllowN(ms(0), 10)
			ra, rb := lim.ReserveN(ms(0), 2), lim.ReserveN(ms(0), 3)
			lim.SetLimitAt(ms(0), 100)
			lim.ReserveN(ms(0), 1)
			if cancelA {
				before := lim.TokensAt(ms(0))
				ra.CancelAt(ms(1000))
				if got := lim.TokensAt(ms(0)); got != before {
					t.Fatalf("Ra's cancel gave back %v tokens, want none", got-before)
				}
			}
			rb.CancelAt(ms(1))
			return lim.TokensAt(ms(1))
		}
		without, with := run(false), run(true)
		t.Logf("after Rb's CancelAt(t0+1ms): %v tokens without Ra's cancel, %v with", without, with)
		if math.Abs(without - -3.9) > 1e-9 || with != without {
			t.Errorf("Rb's cancel: %v tokens after Ra's cancel, %v without, want -3.9", with, without)
		}
	})
}
