package redisbucket

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/admit-go/admit"
)

// Limits of the integer representation the script uses (see script.go).
const (
	maxCapUnits = int64(1) << 52 // capacity in units
	maxPerMicro = int64(1) << 50 // units refilled per tick
	minPer      = int64(1) << 20 // finest rounding of an inexact rate: under 1 part in 2^20
)

// params is a limiter's arithmetic: a token is per units, the bucket holds
// capUnits = capacity·per units and refills m units per tick of q
// microseconds of server time, so the rate is m·1e6/(per·q) tokens per
// second.
type params struct {
	capacity int64
	per      int64
	m        int64
	q        int64 // µs per tick: 1, 10, ..., 1e6
	capUnits int64
	exact    bool // m·1e6/(per·q) is the rate as written
}

// newParams picks the units for capacity and rate, or returns an error
// wrapping admit.ErrInvalidConfig.
//
// The rate is read as the decimal the caller wrote (its shortest form). The
// tick q is the smallest power of ten microseconds, up to a second, for
// which the bucket fits: capacity·per <= 2^52 and m <= 2^50. At that tick,
// when 1e6/(rate·q) as a reduced fraction per/m fits, the representation is
// exact: 3/s is per=1e6, m=3 at q=1µs; 1e9/s is per=1, m=1000; capacity 1e9
// at 1e-6/s is per=1e6, m=1 at q=1s. Otherwise m is the largest power of two
// for which per = ⌈m·1e6/(rate·q)⌉ still fits, and the rate is rounded down
// by less than one part in 2^20 (never over-admitting); if no tick allows
// that, the configuration is rejected. Every capacity up to 2^31 and
// every rate 0 or in [1e-6, 1e9] is accepted this way.
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
		return params{capacity: capacity, per: 1, m: 0, q: 1, capUnits: capacity, exact: true}, nil
	}
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(rate, 'g', -1, 64))
	if !ok || r.Sign() <= 0 {
		return params{}, fmt.Errorf("%w: rate %v per second cannot be represented", admit.ErrInvalidConfig, rate)
	}
	capB := big.NewInt(capacity)
	fits := func(per *big.Int) bool {
		return per.IsInt64() && new(big.Int).Mul(capB, per).Cmp(big.NewInt(maxCapUnits)) <= 0
	}
	// ticksPerToken(q) = 1e6/(rate·q), exactly.
	ticksPerToken := func(q int64) *big.Rat {
		return new(big.Rat).Quo(big.NewRat(1e6, q), r)
	}
	for q := int64(1); q <= 1e6; q *= 10 {
		tpt := ticksPerToken(q)
		if fits(tpt.Num()) && tpt.Denom().IsInt64() && tpt.Denom().Int64() <= maxPerMicro {
			per := tpt.Num().Int64()
			return params{capacity: capacity, per: per, m: tpt.Denom().Int64(), q: q, capUnits: capacity * per, exact: true}, nil
		}
	}
	// Inexact: at the finest tick that allows it, the largest power-of-two
	// m that fits, per rounded up.
	for q := int64(1); q <= 1e6; q *= 10 {
		tpt := ticksPerToken(q)
		best := params{}
		for m := int64(1); m <= maxPerMicro; m <<= 1 {
			pm := new(big.Rat).Mul(tpt, big.NewRat(m, 1))
			per := new(big.Int).Quo(pm.Num(), pm.Denom())
			if new(big.Rat).SetInt(per).Cmp(pm) < 0 {
				per.Add(per, big.NewInt(1))
			}
			if !fits(per) {
				break
			}
			best = params{capacity: capacity, per: per.Int64(), m: m, q: q, capUnits: capacity * per.Int64()}
		}
		if best.m != 0 && best.per >= minPer {
			return best, nil
		}
	}
	return params{}, fmt.Errorf("%w: rate %v per second cannot be represented within 1 part in 2^20 with capacity %d (capacity × units per token must stay below 2^52)", admit.ErrInvalidConfig, rate, capacity)
}

// args are the script's fixed arguments: cap, per, m, q, and the head of
// the stored record, its name ("", length-prefixed) and these parameters.
func (p params) args() [5]string {
	c, per, m, q := strconv.FormatInt(p.capUnits, 10), strconv.FormatInt(p.per, 10), strconv.FormatInt(p.m, 10), strconv.FormatInt(p.q, 10)
	return [5]string{c, per, m, q, "0: " + c + " " + per + " " + m + " " + q + " "}
}

// describe reads the parameters of a stored record's head ("0: cap per m q
// ..."), for the error that reports a mismatch: capacity and rate as a
// user wrote them, or the raw text if it does not parse.
func describe(stored string) string {
	f := strings.Fields(stored)
	if len(f) >= 5 {
		c, err1 := strconv.ParseInt(f[1], 10, 64)
		per, err2 := strconv.ParseInt(f[2], 10, 64)
		m, err3 := strconv.ParseInt(f[3], 10, 64)
		q, err4 := strconv.ParseInt(f[4], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil && err4 == nil && per > 0 && q > 0 {
			return fmt.Sprintf("capacity %d, rate %g/s", c/per, float64(m)*1e6/(float64(per)*float64(q)))
		}
	}
	return fmt.Sprintf("%q", stored)
}

func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{admit.ErrInvalidConfig}, args...)...)
}
