package rate

import (
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"time"
)

// Exact arithmetic.
//
// A limiter's rate is the fraction num/den tokens per nanosecond, both
// uint64, and its balance is tokens + rem/den, with tokens a whole number
// and 0 <= rem < den. A refill over dt nanoseconds adds dt·num/den, computed
// in 128 bits: the quotient goes to tokens and the remainder stays in rem.
// Nothing is rounded, so no error accumulates however many calls there are:
// the balance is exactly what real-number arithmetic gives for the rate as
// read below. (internal/refill's V(t) = ⌊rate·t⌋ needs a fixed origin, a
// capacity of at least 1 and a rate in [1e-6, 1e9]; x/time's API changes the
// rate and burst at any time, allows burst 0, and moves time backwards in its
// explicit-time methods, so this package carries the remainder instead.)
//
// How a Limit becomes num/den, first match wins:
//
//   - the shortest decimal that round-trips to the float64 (the number the
//     caller wrote: Limit(0.1) is exactly 1/10 per second), when it has a
//     denominator 10^m with num < 2^64: every rate with at most 10 decimal
//     places below 1.8e9 per second, with den = 10^19 (so rate changes
//     between such rates keep rem exactly); larger rates use a smaller m;
//   - exactly one token per d nanoseconds, when the Limit equals Every(d) for
//     a whole number of nanoseconds d (Every(3*time.Second) is exactly 1/3
//     per second, not 0.3333333333333333);
//   - otherwise the rate rounded down to a multiple of 2^-63 tokens per
//     nanosecond (about 1.1e-10 per second), never up.
//
// Limits at or below zero, and NaN, refill nothing (num = 0); Inf, +Inf and
// finite rates of 2^64 tokens per nanosecond or more fill the bucket in any
// positive time (fill). Both keep the previous den, so that the fraction of
// the balance survives a change to them and back exactly.

// Time is kept as int64 nanoseconds since epoch, a reading of the monotonic
// clock taken when the package initialises. Readings are clamped to
// ±maxTime (146 years either side), which leaves room to add any
// time.Duration delay with saturation.
var epoch = time.Now()

const (
	maxTime = int64(1) << 62
	// never is the time of a NewLimiter's last update: before any time a
	// caller can pass, like x/time/rate's zero time.Time.
	never = math.MinInt64
	// minTokens bounds how far reservations take a balance below zero, so
	// that tokens − n and room computations never overflow.
	minTokens = -(int64(1) << 62)
)

// nanotime is the implicit-time API's clock: only the monotonic clock is
// read (time.Since's fast path).
func nanotime() int64 { return int64(time.Since(epoch)) }

// at converts an explicit time to the axis. t.Sub uses the monotonic
// readings when both carry one, as x/time/rate's t.Sub(last) does.
func at(t time.Time) int64 {
	d := int64(t.Sub(epoch))
	return min(max(d, -maxTime), maxTime)
}

// addSat returns t + d, saturating at math.MaxInt64; d >= 0.
func addSat(t, d int64) int64 {
	if t > math.MaxInt64-d {
		return math.MaxInt64
	}
	return t + d
}

// burstCap is the balance cap for burst b, clamped into the range the
// arithmetic supports.
func burstCap(b int) int64 { return max(int64(b), minTokens) }

// ratio converts l to num/den tokens per nanosecond, or to fill, as
// described above.
func ratio(l Limit, oldDen uint64) (num, den uint64, fill bool) {
	r := float64(l)
	switch {
	case !(r > 0):
		return 0, max(oldDen, 1), false
	case math.IsInf(r, 1) || l == Inf:
		return 0, max(oldDen, 1), true
	}
	perNs := new(big.Rat).Quo(new(big.Rat).SetFloat64(r), big.NewRat(1e9, 1))
	if q, ok := new(big.Rat).SetString(strconv.FormatFloat(r, 'g', -1, 64)); ok {
		q.Quo(q, big.NewRat(1e9, 1))
		for m := 19; m >= 0; m-- {
			d := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(m)), nil)
			n := new(big.Rat).Mul(q, new(big.Rat).SetInt(d))
			if n.IsInt() && n.Num().Sign() > 0 && n.Num().BitLen() <= 64 {
				return n.Num().Uint64(), d.Uint64(), false
			}
		}
	}
	if x := 1e9 / r; x >= 0.5 && x < 9e18 {
		d0 := int64(math.Round(x))
		for d := d0 - 1; d <= d0+1; d++ {
			if d >= 1 && Every(time.Duration(d)) == l {
				return 1, uint64(d), false
			}
		}
	}
	for s := 63; s >= 0; s-- {
		n := new(big.Rat).Mul(perNs, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(s))))
		q := new(big.Int).Quo(n.Num(), n.Denom())
		if q.BitLen() <= 64 {
			return q.Uint64(), uint64(1) << s, false
		}
	}
	return 0, max(oldDen, 1), true
}

// rescale converts a remainder rem/from to the largest rem'/to not above
// it. It is exact when to is a multiple of from (always when from == to).
func rescale(rem, from, to uint64) uint64 {
	if from == to || rem == 0 || from == 0 {
		if from == 0 {
			return 0
		}
		return rem
	}
	hi, lo := bits.Mul64(rem, to)
	q, _ := bits.Div64(hi, lo, from) // rem < from, so q < to: no overflow
	return q
}

// refill adds dt nanoseconds of refill to tokens + rem/den. A sum beyond
// math.MaxInt64 saturates there (every cap is below it). It requires num > 0.
func refill(tokens int64, rem, dt, num, den uint64) (int64, uint64) {
	hi, lo := bits.Mul64(dt, num)
	var c uint64
	lo, c = bits.Add64(lo, rem, 0)
	hi += c
	if hi >= den {
		return math.MaxInt64, 0 // at least 2^64 tokens
	}
	q, r := bits.Div64(hi, lo, den)
	if room := uint64(math.MaxInt64) - uint64(tokens); q >= room {
		return math.MaxInt64, 0
	}
	return tokens + int64(q), r
}

// delay returns ⌊(−after − rem/den) / (num/den)⌋ nanoseconds, the time until
// a balance of after + rem/den (after < 0) reaches zero, rounded down as
// x/time/rate's float-to-Duration conversion does, or InfDuration when
// that is beyond math.MaxInt64 or nothing refills.
func delay(after int64, rem, num, den uint64) int64 {
	if num == 0 {
		return int64(InfDuration)
	}
	need := uint64(0) - uint64(after) // -after, exact for after >= -2^63
	hi, lo := bits.Mul64(need, den)
	var b uint64
	lo, b = bits.Sub64(lo, rem, 0)
	hi -= b
	if hi >= num {
		return int64(InfDuration)
	}
	q, _ := bits.Div64(hi, lo, num)
	if q > math.MaxInt64 {
		return int64(InfDuration)
	}
	return int64(q)
}

// float converts tokens + rem/den to a float64.
func float(tokens int64, rem, den uint64) float64 {
	if rem == 0 || den == 0 {
		return float64(tokens)
	}
	return float64(tokens) + float64(rem)/float64(den)
}
