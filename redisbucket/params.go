package redisbucket

import (
	"fmt"
	"math"
	"math/big"
	"strconv"

	"github.com/admit-go/admit"
)

// Limits of the integer representation the script uses (see script.go).
const (
	maxCapUnits = int64(1) << 52 // capacity in units
	maxPerMicro = int64(1) << 50 // units refilled per microsecond
	minPer      = int64(1) << 20 // finest rounding of an inexact rate: under 1 part in 2^20
)

// params is a limiter's arithmetic: a token is per units, the bucket holds
// capUnits = capacity·per units and refills m units per microsecond of
// server time, so the rate is m·1e6/per tokens per second.
type params struct {
	capacity int64
	per      int64
	m        int64
	capUnits int64
	exact    bool // m·1e6/per is the rate as written
}

// newParams picks the units for capacity and rate, or returns an error
// wrapping admit.ErrInvalidConfig.
//
// The rate is read as the decimal the caller wrote (its shortest form). When
// 1e6/rate, as a reduced fraction per/m, fits (capacity·per <= 2^52, m <=
// 2^50), the representation is exact: 3/s is per=1e6, m=3; 0.5/s is per=2e6,
// m=1; 1e9/s is per=1, m=1000. Otherwise m is the largest power of two for
// which per = ⌈m·1e6/rate⌉ still fits, and the rate is rounded down by less
// than one part in 2^20 (never over-admitting); it is rejected if that
// cannot be reached. A full refill from empty must take under 2^52 µs
// (about 142 years): capacity/rate < 4.5e9 s.
func newParams(capacity int64, rate float64) (params, error) {
	switch {
	case capacity < 1:
		return params{}, fmt.Errorf("%w: capacity %d is below 1", admit.ErrInvalidConfig, capacity)
	case capacity > maxCapUnits:
		return params{}, fmt.Errorf("%w: capacity %d is above 2^52", admit.ErrInvalidConfig, capacity)
	case math.IsNaN(rate) || math.IsInf(rate, 0):
		return params{}, fmt.Errorf("%w: rate %v per second is not finite", admit.ErrInvalidConfig, rate)
	case rate < 0:
		return params{}, fmt.Errorf("%w: rate %v per second is negative", admit.ErrInvalidConfig, rate)
	case rate > 1e9:
		return params{}, fmt.Errorf("%w: rate %v per second is above 1e9", admit.ErrInvalidConfig, rate)
	case rate == 0:
		return params{capacity: capacity, per: 1, m: 0, capUnits: capacity, exact: true}, nil
	}
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(rate, 'g', -1, 64))
	if !ok || r.Sign() <= 0 {
		return params{}, fmt.Errorf("%w: rate %v per second cannot be represented", admit.ErrInvalidConfig, rate)
	}
	// per/m = 1e6/rate, reduced.
	q := new(big.Rat).Quo(big.NewRat(1e6, 1), r)
	capB := big.NewInt(capacity)
	if q.Num().IsInt64() && q.Denom().IsInt64() && q.Denom().Int64() <= maxPerMicro &&
		new(big.Int).Mul(capB, q.Num()).Cmp(big.NewInt(maxCapUnits)) <= 0 {
		per := q.Num().Int64()
		return params{capacity: capacity, per: per, m: q.Denom().Int64(), capUnits: capacity * per, exact: true}, nil
	}
	// Inexact: the largest power-of-two m that fits, per rounded up.
	best := params{}
	for m := int64(1); m <= maxPerMicro; m <<= 1 {
		pm := new(big.Rat).Mul(q, big.NewRat(m, 1))
		per := new(big.Int).Quo(pm.Num(), pm.Denom())
		if new(big.Rat).SetInt(per).Cmp(pm) < 0 {
			per.Add(per, big.NewInt(1))
		}
		if !per.IsInt64() || new(big.Int).Mul(capB, per).Cmp(big.NewInt(maxCapUnits)) > 0 {
			break
		}
		best = params{capacity: capacity, per: per.Int64(), m: m, capUnits: capacity * per.Int64()}
	}
	switch {
	case best.m == 0:
		return params{}, fmt.Errorf("%w: capacity %d at rate %v per second: a full refill would take 2^52 µs (about 142 years) or more", admit.ErrInvalidConfig, capacity, rate)
	case best.per < minPer:
		return params{}, fmt.Errorf("%w: rate %v per second cannot be represented within 1 part in 2^20 with capacity %d", admit.ErrInvalidConfig, rate, capacity)
	}
	return best, nil
}
