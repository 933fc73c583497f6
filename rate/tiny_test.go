package rate

import (
	"testing"
	"time"

	xrate "golang.org/x/time/rate"
)

// TestTinyLimitKeepsBalance: a positive limit too small for any 64-bit
// fraction (below 2^-64 token/ns, not a short decimal) refills nothing, as
// zero does, and like zero it keeps the balance exactly: SetLimitAt to it
// and back rounds nothing. (It used to take the denominator 1 and round
// the balance down to a whole token: 2.5 tokens became 2.)
func TestTinyLimitKeepsBalance(t *testing.T) {
	t0 := time.Now()
	for _, tiny := range []Limit{1e-12, 5e-324} {
		lim, x := NewLimiter(0.5, 3), xrate.NewLimiter(0.5, 3)
		lim.AllowN(t0, 3)
		x.AllowN(t0, 3)
		t1 := t0.Add(5 * time.Second) // 2.5 tokens
		lim.SetLimitAt(t1, tiny)
		x.SetLimitAt(t1, xrate.Limit(tiny))
		if got, want := lim.TokensAt(t1), x.TokensAt(t1); got != want || got != 2.5 {
			t.Errorf("SetLimitAt(%v): %v tokens, x/time/rate %v, want 2.5", tiny, got, want)
		}
		lim.SetLimitAt(t1, 0.5)
		if got := lim.TokensAt(t1.Add(time.Second)); got != 3 {
			t.Errorf("SetLimitAt(%v) and back: %v tokens a second later, want 3", tiny, got)
		}
	}
}
