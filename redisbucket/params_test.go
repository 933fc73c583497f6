package redisbucket

import (
	"errors"
	"math"
	"math/big"
	"strconv"
	"testing"

	"github.com/admit-go/admit"
)

func TestParamsExact(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
		per, m   int64
		q        int64
	}{
		{10, 3, 1e6, 3, 1},
		{10, 0.5, 2e6, 1, 1},
		{10, 1e9, 1, 1000, 1},
		{1000, 1e-6, 1e12, 1, 1},
		{1e9, 1000, 1000, 1, 1},
		{1, 7, 1e6, 7, 1},
		{5, 0, 1, 0, 1},
		{1e9, 1e-6, 1e6, 1, 1e6},
		{1e6, 1e-6, 1e9, 1, 1e3},
	} {
		p, err := newParams(tc.capacity, tc.rate)
		if err != nil {
			t.Fatalf("newParams(%d, %v): %v", tc.capacity, tc.rate, err)
		}
		if p.per != tc.per || p.m != tc.m || p.q != tc.q || !p.exact || p.capUnits != tc.capacity*tc.per {
			t.Errorf("newParams(%d, %v) = per %d m %d q %d exact %v cap %d, want per %d m %d q %d exact", tc.capacity, tc.rate, p.per, p.m, p.q, p.exact, p.capUnits, tc.per, tc.m, tc.q)
		}
	}
}

// Every accepted configuration keeps the script's values below 2^53 and
// never rounds the rate up.
func TestParamsHeadroom(t *testing.T) {
	caps := []int64{1, 2, 3, 10, 1000, 123456, 1e6, 1e9, 1 << 31, 1 << 32, 1 << 40, 1 << 52}
	rates := []float64{0, 1e-6, 1.0 / 3, 0.7, 1, 2.5, 3, 1e3, 12345.678, 1e6, 1e9 / 3, 1e9}
	limit := big.NewInt(1 << 53)
	for _, c := range caps {
		for _, r := range rates {
			p, err := newParams(c, r)
			if err != nil {
				if c <= 1<<31 && (r == 0 || r >= 1e-6) {
					t.Errorf("newParams(%d, %v): %v; every capacity up to 2^31 with every rate is documented as accepted", c, r, err)
				}
				if !errors.Is(err, admit.ErrInvalidConfig) {
					t.Errorf("newParams(%d, %v): %v does not wrap ErrInvalidConfig", c, r, err)
				}
				continue
			}
			sum := new(big.Int).Add(big.NewInt(p.capUnits), new(big.Int).Mul(big.NewInt(2), big.NewInt(p.m)))
			if sum.Cmp(limit) >= 0 || p.capUnits != c*p.per {
				t.Errorf("newParams(%d, %v): cap %d + 2m %d reaches 2^53", c, r, p.capUnits, p.m)
			}
			if r == 0 {
				continue
			}
			// Delivered rate m·1e6/per against the decimal asked for.
			got := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(p.m), big.NewInt(1e6)), new(big.Int).Mul(big.NewInt(p.per), big.NewInt(p.q)))
			want, _ := new(big.Rat).SetString(strconv.FormatFloat(r, 'g', -1, 64))
			if got.Cmp(want) > 0 {
				t.Errorf("newParams(%d, %v): rate rounded up to %v", c, r, got.FloatString(12))
			}
			lo := new(big.Rat).Mul(want, big.NewRat(1<<20-1, 1<<20))
			if got.Cmp(lo) < 0 {
				t.Errorf("newParams(%d, %v): rate %v is more than 2^-20 low", c, r, got.FloatString(12))
			}
			if p.exact && got.Cmp(want) != 0 {
				t.Errorf("newParams(%d, %v): marked exact but delivers %v", c, r, got.FloatString(12))
			}
		}
	}
}

func TestParamsReject(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
	}{
		{0, 1}, {-1, 1}, {1<<52 + 1, 1}, {1, math.NaN()}, {1, math.Inf(1)}, {1, math.Inf(-1)}, {1, -1}, {1, 1e10},
		{1 << 52, 0.7}, // inexact: per >= 2^20 cannot fit
	} {
		if _, err := newParams(tc.capacity, tc.rate); !errors.Is(err, admit.ErrInvalidConfig) {
			t.Errorf("newParams(%d, %v) = %v, want ErrInvalidConfig", tc.capacity, tc.rate, err)
		}
	}
}
