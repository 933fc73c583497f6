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
// uint64, and its balance is an integer count of 1/den tokens held in 128
// bits (fixed). A refill over dt nanoseconds adds exactly dt·num units: one
// 64×64-bit multiply and a 128-bit add, no division. Nothing is rounded, so
// no error accumulates however many calls there are: the balance is exactly
// what real-number arithmetic gives for the rate as read below. Division
// happens only to compute a wait (⌊deficit/num⌋ ns) and to convert a
// balance to float64.
//
// This is internal/refill's idea (integers, refill as a pure function of
// elapsed time, so rounding never compounds) with the unit chosen per rate,
// 1/den token, instead of 2^-k token: refill.Params needs a fixed capacity
// of at least 1 and a rate in [1e-6, 1e9], rounds the rate to 64 fractional
// bits, and differences V(t) from one fixed origin, while x/time's API
// changes the rate and burst at any time, allows burst 0, and moves time
// backwards in its explicit-time methods. With 1/den units every such
// change is exact (see below), which is what lets the differential test
// demand equality with exact big.Rat arithmetic at every step.
//
// How a Limit becomes num/den, first match wins:
//
//   - the shortest decimal that round-trips to the float64 (the number the
//     caller wrote: Limit(0.1) is exactly 1/10 per second), when it has a
//     denominator 10^m with num < 2^64: every rate with at most 10 decimal
//     places below 1.8e9 per second, with den = 10^19 (so a SetLimit
//     between such rates converts the balance exactly); larger rates use a
//     smaller m;
//   - exactly one token per d nanoseconds, when the Limit equals Every(d) for
//     a whole number of nanoseconds d (Every(3*time.Second) is exactly 1/3
//     per second, not 0.3333333333333333);
//   - otherwise the largest fraction num/den at or below that decimal with
//     num and den below 2^64 (below), within a factor 1 − 2^-62 of it: so
//     a delay is the exact one rounded down to a nanosecond, or for an
//     exact delay that lies within 2^-61 of itself below the next
//     nanosecond, that next one: never early, and at most 1 ns late for
//     delays under 2^61 ns (73 years). (Rounding to 2^-63 token/ns instead
//     made Limit(7.0/86400) 15.5 ms late per token.) Rates below 2^-64
//     token/ns (5.4e-11 per second) that are not such decimals read as 0.
//
// Limits at or below zero, NaN and those that read as 0, refill nothing
// (num = 0); Inf, +Inf and
// finite rates of 2^64 tokens per nanosecond or more fill the bucket in any
// positive time (fill). Both keep the previous den, so that the balance
// survives a change to them and back exactly. A SetLimit between rates of
// different den rounds the balance down to the new unit, once: by less than
// 1/den token.

// epoch is the origin of the time axis that the implicit-time API's clock
// readings are on: a reading of the monotonic clock taken when the package
// initialises (axis.go).
var epoch = time.Now()

// minTokens bounds how far reservations take a balance below zero, so that
// tokens − n and room computations never overflow.
const minTokens = -(int64(1) << 62)

// nanotime is the implicit-time API's clock: only the monotonic clock is
// read (time.Since's fast path).
func nanotime() int64 { return int64(time.Since(epoch)) }

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
	// perNs is the rate as read: the shortest decimal, per nanosecond (the
	// float itself should the decimal not parse, which it always does).
	perNs := new(big.Rat).Quo(new(big.Rat).SetFloat64(r), big.NewRat(1e9, 1))
	if q, ok := new(big.Rat).SetString(strconv.FormatFloat(r, 'g', -1, 64)); ok {
		q.Quo(q, big.NewRat(1e9, 1))
		perNs = q
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
	if perNs.Cmp(new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 64))) >= 0 {
		return 0, max(oldDen, 1), true
	}
	num, den = below(perNs, new(big.Int).SetUint64(math.MaxUint64))
	if num == 0 {
		// Too slow for any such fraction: it refills nothing, as zero does,
		// and keeps the balance's unit as zero does (below's 0/1 would
		// round the balance down to a whole token).
		return 0, max(oldDen, 1), false
	}
	return num, den, false
}

// below returns the largest fraction num/den <= x with num and den at most
// bound, a uint64 (den >= 1; num = 0 if every such positive fraction
// exceeds x), for 0 < x <= bound. ratio passes 2^64 − 1. It descends the Stern–Brocot tree: lo = a/b <= x < hi = c/d
// are neighbours (bc − ad = 1), so every fraction strictly between them has
// a numerator of at least a+c and a denominator of at least b+d; each round
// moves lo, then hi, as many mediant steps towards x as the bound allows.
// When neither can move, no fraction within the bound lies in (lo, x]: lo
// is the answer. Then bc − ad = 1 gives x − a/b < 1/(bd), and since the
// mediant is outside the bound, one of a, b, c, d is at least 2^63, which
// makes bdx > 2^63 − 1 whenever a > 0: the relative error is below 2^-62
// (TestRatioBelowIsClose checks it).
func below(x *big.Rat, bound *big.Int) (num, den uint64) {
	p, q := x.Num(), x.Denom()
	a, b, c, d := big.NewInt(0), big.NewInt(1), big.NewInt(1), big.NewInt(0)
	t, u := new(big.Int), new(big.Int)
	// over and under: lo = a/b is under x by under/(bq), hi = c/d over it
	// by over/(dq).
	under, over, k := new(big.Int), new(big.Int), new(big.Int)
	gaps := func() bool {
		under.Sub(t.Mul(p, b), u.Mul(a, q))
		over.Sub(t.Mul(c, q), u.Mul(p, d))
		return under.Sign() != 0 // lo == x: done
	}
	// step moves e/f by k mediant steps of g/h, k lowered so that e + k·g
	// and f + k·h stay within the bound, and reports whether it moved.
	step := func(e, f, g, h *big.Int) bool {
		for _, lim := range [2][2]*big.Int{{e, g}, {f, h}} {
			if lim[1].Sign() > 0 {
				if m := new(big.Int).Quo(t.Sub(bound, lim[0]), lim[1]); m.Cmp(k) < 0 {
					k.Set(m)
				}
			}
		}
		if k.Sign() <= 0 {
			return false
		}
		e.Add(e, t.Mul(k, g))
		f.Add(f, t.Mul(k, h))
		return true
	}
	for gaps() {
		// lo: the most k with (a + k·c)/(b + k·d) <= x, that is
		// k·over <= under.
		k.Quo(under, over)
		movedLo := step(a, b, c, d)
		if !gaps() {
			break
		}
		// hi: the most k with (c + k·a)/(d + k·b) > x, that is
		// k·under < over.
		k.Sub(over, big.NewInt(1))
		k.Quo(k, under)
		if movedHi := step(c, d, a, b); !movedLo && !movedHi {
			break
		}
	}
	return a.Uint64(), b.Uint64()
}

// fixed is a balance in units of 1/den token: a signed 128-bit two's
// complement integer. Balances lie in [minTokens·den, MaxInt64·den], so
// |value| < 2^127, and every sum formed below stays inside 2^128.
type fixed struct{ hi, lo uint64 }

// mul returns a·b; it requires a·b < 2^127 to read as positive.
func mul(a, b uint64) fixed {
	hi, lo := bits.Mul64(a, b)
	return fixed{hi, lo}
}

// tokensFixed returns n·den for any int64 n.
func tokensFixed(n int64, den uint64) fixed {
	if n >= 0 {
		return mul(uint64(n), den)
	}
	return mul(uint64(-n), den).neg() // -n: n >= minTokens here, never MinInt64
}

func (a fixed) add(b fixed) fixed {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, c)
	return fixed{hi, lo}
}

func (a fixed) sub(b fixed) fixed {
	lo, c := bits.Sub64(a.lo, b.lo, 0)
	hi, _ := bits.Sub64(a.hi, b.hi, c)
	return fixed{hi, lo}
}

func (a fixed) neg() fixed { return fixed{}.sub(a) }

func (a fixed) negative() bool { return int64(a.hi) < 0 }

// less compares as signed integers.
func (a fixed) less(b fixed) bool {
	return int64(a.hi) < int64(b.hi) || a.hi == b.hi && a.lo < b.lo
}

// ule compares as unsigned integers: a <= b.
func (a fixed) ule(b fixed) bool { return a.hi < b.hi || a.hi == b.hi && a.lo <= b.lo }

func (a fixed) big() *big.Int {
	x := new(big.Int).SetUint64(a.hi)
	x.Lsh(x, 64).Or(x, new(big.Int).SetUint64(a.lo))
	if a.negative() {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), 128))
	}
	return x
}

func fixedFromBig(x *big.Int) fixed {
	y := new(big.Int).Set(x)
	if y.Sign() < 0 {
		y.Add(y, new(big.Int).Lsh(big.NewInt(1), 128))
	}
	lo := new(big.Int).And(y, new(big.Int).SetUint64(math.MaxUint64)).Uint64()
	return fixed{new(big.Int).Rsh(y, 64).Uint64(), lo}
}

// rescale returns ⌊a·to/from⌋: the balance in units of 1/to token. It is
// exact when from divides to (always when from == to). Not a hot path.
func rescale(a fixed, from, to uint64) fixed {
	if from == to {
		return a
	}
	x := a.big()
	x.Mul(x, new(big.Int).SetUint64(to))
	x.Div(x, new(big.Int).SetUint64(from)) // Euclidean: floor, from > 0
	return fixedFromBig(x)
}

// delay returns ⌊d/num⌋ nanoseconds for a deficit of d units, the time until
// the balance −d reaches zero, rounded down as x/time/rate's float-to-
// Duration conversion does, or InfDuration when that is beyond
// math.MaxInt64 or nothing refills.
func delay(d fixed, num uint64) int64 {
	if num == 0 || d.hi >= num {
		return int64(InfDuration)
	}
	q, _ := bits.Div64(d.hi, d.lo, num)
	if q > math.MaxInt64 {
		return int64(InfDuration)
	}
	return int64(q)
}

// float converts a balance to a float64 number of tokens.
func float(a fixed, den uint64) float64 {
	if den == 0 {
		return 0
	}
	m := a
	if a.negative() {
		m = a.neg()
	}
	q, r := bits.Div64(m.hi, m.lo, den) // |a|/den < 2^63: no overflow
	f := float64(q)
	if r != 0 {
		f += float64(r) / float64(den)
	}
	if a.negative() {
		return -f
	}
	return f
}
