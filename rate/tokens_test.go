package rate

import (
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
