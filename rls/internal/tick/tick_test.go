package tick

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/admit-go/admit"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		capacity, count int64
		period          time.Duration
		base            time.Duration
		limit           int64
		want            Params
	}{
		// 7 a minute in ns: a token is 60e9/7 ns, reduced to per 6e10, m 7.
		{7, 7, time.Minute, time.Nanosecond, 1 << 60, Params{CapU: 7 * 60e9, Per: 60e9, M: 7, Q: 1}},
		// 4e9 a second: 4 units a ns, a unit a token.
		{4e9, 4e9, time.Second, time.Nanosecond, 1 << 60, Params{CapU: 4e9, Per: 1, M: 4, Q: 1}},
		// 1 a year, burst 5e7, on Redis's 2^52: only whole seconds fit
		// (2 × 5e7 × 31536000 ≤ 2^52).
		{5e7, 1, 365 * 24 * time.Hour, time.Microsecond, 1 << 52, Params{CapU: 5e7 * 31536000, Per: 31536000, M: 1, Q: 1e6}},
		// No refill: a token is a unit.
		{3, 0, time.Hour, time.Microsecond, 1 << 52, Params{CapU: 3, Per: 1, Q: 1e6}},
	} {
		got, err := New(tc.capacity, tc.count, tc.period, tc.base, tc.limit)
		if err != nil || got != tc.want {
			t.Errorf("New(%d, %d, %v) = %+v, %v; want %+v", tc.capacity, tc.count, tc.period, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		capacity, count int64
		period          time.Duration
	}{
		{0, 1, time.Second},
		{1<<32 + 1, 1, time.Second},
		{1, -1, time.Second},
		{1, 1, 1500 * time.Millisecond},
		{1e8, 1, 365 * 24 * time.Hour},                 // 2 × 1e8 × 31536000 > 2^52: room for minus one burst
		{1 << 51, 0, 365 * 24 * time.Hour},             // capacity above 2^32
		{4294967295, 4294967295, 365 * 24 * time.Hour}, // gcd 15: 2 × 2^32 × 2102400 > 2^52
	} {
		if _, err := New(tc.capacity, tc.count, tc.period, time.Microsecond, 1<<52); !errors.Is(err, admit.ErrInvalidConfig) {
			t.Errorf("New(%d, %d, %v): %v, want ErrInvalidConfig", tc.capacity, tc.count, tc.period, err)
		}
	}
}

// TestRefillExact: 7 a minute delivers its k-th token at exactly k·60/7 s
// (rounded up to the nanosecond), never a nanosecond earlier.
func TestRefillExact(t *testing.T) {
	p, err := New(7, 7, time.Minute, time.Nanosecond, 1<<60)
	if err != nil {
		t.Fatal(err)
	}
	for k := int64(1); k <= 7; k++ {
		due := (k*60e9 + 6) / 7 // ceil(k·60e9/7) ns
		d, _ := p.Refill(p.CapU, 0, due-1)
		if got := p.Remaining(d); got != k-1 {
			t.Fatalf("token %d: %d whole tokens a nanosecond early", k, got)
		}
		d, _ = p.Refill(p.CapU, 0, due)
		if got := p.Remaining(d); got != k {
			t.Fatalf("token %d: %d whole tokens when due", k, got)
		}
	}
	if d, t1 := p.Refill(5, 10, 9); d != 5 || t1 != 10 {
		t.Fatalf("a stale reading refilled or moved time back: %d %d", d, t1)
	}
}

// TestCarry checks Carry against exact rationals on random parameters:
// the balance in tokens is kept to the new units (rounded down), clamped to
// the new range, [−capacity, capacity], whatever the old and new limits (a
// balance below zero is never forgiven beyond the new bound); a full bucket
// stays full.
func TestCarry(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		gen := func() Params {
			per := 1 + rnd.Int64N(1<<uint(1+rnd.IntN(40)))
			capacity := 1 + rnd.Int64N(1<<uint(1+rnd.IntN(18)))
			return Params{CapU: capacity * per, Per: per, M: 1, Q: 1}
		}
		old, p := gen(), gen()
		d := rnd.Int64N(old.MaxDebt() + 1)
		got := p.Carry(&old, d)
		if d == 0 {
			if got != 0 {
				t.Fatalf("a full bucket carried debt %d", got)
			}
			continue
		}
		// want: floor((old.CapU − d) · p.Per / old.Per) clamped to
		// [−p.CapU, p.CapU].
		b := new(big.Rat).SetFrac(big.NewInt(old.CapU-d), big.NewInt(old.Per)) // tokens
		// big.Int's Div is Euclidean: the floor, for a positive divisor.
		units := new(big.Int).Div(new(big.Int).Mul(big.NewInt(old.CapU-d), big.NewInt(p.Per)), big.NewInt(old.Per))
		if !units.IsInt64() {
			units.SetInt64(1 << 62) // beyond any capacity: clamped below
		}
		nb := units.Int64()
		nb = min(max(nb, -p.CapU), p.CapU)
		if want := p.CapU - nb; got != want {
			t.Fatalf("carry of %v tokens from %+v (d %d) into %+v: debt %d, want %d", b, old, d, p, got, want)
		}
		if got < 0 || got > p.MaxDebt() {
			t.Fatalf("debt %d outside [0, %d]", got, p.MaxDebt())
		}
	}
	// Into the same parameters, a carry changes nothing.
	p := Params{CapU: 10 * 7, Per: 7, M: 1, Q: 1}
	for d := int64(0); d <= p.MaxDebt(); d++ {
		if got := p.Carry(&p, d); got != d {
			t.Fatalf("carry into itself: %d → %d", d, got)
		}
	}
}

func TestCharge(t *testing.T) {
	p := Params{CapU: 10, Per: 1, M: 1, Q: 1}
	if !p.Holds(0, 10) || p.Holds(0, 11) || p.Holds(11, 0) || !p.Holds(10, 0) {
		t.Fatal("Holds")
	}
	if got := p.Charge(5, 1<<62); got != 20 {
		t.Fatalf("a huge charge: debt %d, want the bound 20", got)
	}
	if got := p.Remaining(15); got != 0 {
		t.Fatalf("remaining in debt: %d", got)
	}
	if full, ok := p.Full(15); !ok || full != 15 {
		t.Fatalf("Full(15) = %d %v", full, ok)
	}
}
