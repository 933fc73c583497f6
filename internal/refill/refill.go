// Package refill holds the arithmetic and the blocking loop that the three
// token buckets share, so that they differ only in how they synchronise.
//
// # Units
//
// Balances are integers in units of 2^-k tokens. k is chosen per bucket as
// large as the limits below allow: a unit is then the refill of at most one
// nanosecond, so the representation is as fine as the clock, unless the
// capacity is so large for its rate that finer units would not fit (at
// capacity 1e9 and 1e-6 tokens/s a unit is about 466 µs of refill, still
// 2^-31 of a token). At 1e9 tokens/s a unit is a whole token; at 1 token/s it
// is 2^-29 of one.
//
// # Refill without drift
//
// Refill is never accumulated call by call. V(t), the number of units the
// rate has produced from the bucket's origin to elapsed time t, is a pure
// function of t, and every refill is a difference V(now) − V(then). Rounding
// therefore never compounds: after any number of calls the total refilled is
// within one unit of rate × elapsed, which gives the exact long-run rate.
//
// V(t) = t·w + ⌊t·f / 2^64⌋, where w + f/2^64 is the rate in units per
// nanosecond, with f rounded up. The rate is read as the decimal number the
// caller wrote (its shortest round-trip form), so 1e-6 is exactly 10^-6.
// Rounding f up makes V exact wherever the true value is a whole unit (1 s at
// 1 token/s yields exactly one token) and early by less than one unit
// elsewhere, well inside the bound's "+1 for rounding".
//
// # Limits and headroom
//
//   - capacity << k < 2^61;
//   - w + f/2^64 <= 1 unit per ns, so V(t) <= t <= Horizon = 2^62 ns (about
//     146 years from the bucket's creation). Past the horizon, time stops:
//     the bucket keeps working but no longer refills;
//   - reservations take a balance at most 2^62 units below zero (maxDebt).
//
// Every sum of two of these stays below 2^63, so no intermediate overflows.
// A rate above 1e9 tokens/s, or one so small that f would carry fewer than
// 32 significant bits, cannot be represented and is rejected.
package refill

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"

	"github.com/admit-go/admit"
)

// Horizon is the largest elapsed time, in nanoseconds, that V accepts.
const Horizon = int64(1) << 62

// Params is a bucket's immutable arithmetic: its capacity and rate in units.
// The zero value is not usable; build one with NewParams.
type Params struct {
	Cap   int64 // capacity in units, < 2^61
	Shift uint  // units per token is 1 << Shift
	w, f  uint64
	zero  bool // rate is 0: V is constantly 0
}

// NewParams validates capacity and rate and picks the finest unit that keeps
// every quantity inside int64. Errors wrap admit.ErrInvalidConfig and name
// the value.
func NewParams(capacity int64, rate float64) (Params, error) {
	switch {
	case capacity < 1:
		return Params{}, fmt.Errorf("%w: capacity %d is below 1", admit.ErrInvalidConfig, capacity)
	case capacity >= 1<<61:
		return Params{}, fmt.Errorf("%w: capacity %d is 2^61 or more", admit.ErrInvalidConfig, capacity)
	case math.IsNaN(rate) || math.IsInf(rate, 0):
		return Params{}, fmt.Errorf("%w: rate %v per second is not finite", admit.ErrInvalidConfig, rate)
	case rate < 0:
		return Params{}, fmt.Errorf("%w: rate %v per second is negative", admit.ErrInvalidConfig, rate)
	case rate > 1e9:
		return Params{}, fmt.Errorf("%w: rate %v per second is above 1e9 and cannot be represented", admit.ErrInvalidConfig, rate)
	}
	// Largest k with capacity << k < 2^61.
	k := uint(61 - bits.Len64(uint64(capacity)))
	if rate == 0 {
		return Params{Cap: capacity << k, Shift: k, zero: true}, nil
	}
	// Lower k until the rate is at most 1 unit per ns; rate <= 1e9 makes
	// k = 0 always qualify. The rate in units/ns, scaled by 2^64, is
	// rate · 2^(k+64) / 1e9, computed exactly and rounded up.
	//
	// The rate is taken at its shortest decimal form, the one the caller
	// wrote: 1e-6 means exactly one token per 10^6 s, not the binary
	// float64 nearest to it, which is a hair less.
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(rate, 'g', -1, 64))
	if !ok {
		return Params{}, fmt.Errorf("%w: rate %v per second cannot be represented", admit.ErrInvalidConfig, rate)
	}
	billion := new(big.Rat).SetInt64(1e9)
	one := new(big.Rat).SetInt64(1)
	var scaled *big.Int
	for ; ; k-- {
		perNs := new(big.Rat).Quo(new(big.Rat).Mul(r, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), k))), billion)
		if perNs.Cmp(one) <= 0 || k == 0 {
			num := new(big.Int).Lsh(perNs.Num(), 64)
			q, m := new(big.Int).QuoRem(num, perNs.Denom(), new(big.Int))
			if m.Sign() != 0 {
				q.Add(q, big.NewInt(1))
			}
			scaled = q
			break
		}
	}
	if scaled.BitLen() < 32 {
		return Params{}, fmt.Errorf("%w: rate %v per second is too small to represent with capacity %d", admit.ErrInvalidConfig, rate, capacity)
	}
	mask := new(big.Int).SetUint64(math.MaxUint64)
	w := new(big.Int).Rsh(scaled, 64).Uint64()
	f := new(big.Int).And(scaled, mask).Uint64()
	return Params{Cap: capacity << k, Shift: k, w: w, f: f}, nil
}

// Units converts n tokens to units. It requires 0 <= n <= capacity.
func (p *Params) Units(n int64) int64 { return n << p.Shift }

// Float converts units to tokens, rounded down: float64(u) rounds to
// nearest, which above 2^53 units (a capacity of 1e9 is about 2^61) can
// round a balance just short of n tokens up to n. Rounded down, ⌊Float(u)⌋
// is exactly the whole tokens in u (a whole number of tokens is a float64
// at most u), so a limiter's Tokens never reports a token TryAcquireN
// would refuse.
func (p *Params) Float(u int64) float64 { return math.Ldexp(floorFloat(u), -int(p.Shift)) }

// floorFloat returns the largest float64 at most u (float64(u) rounds to
// nearest).
func floorFloat(u int64) float64 {
	f := float64(u)
	if f >= 0x1p63 || int64(f) > u {
		f = math.Nextafter(f, math.Inf(-1))
	}
	return f
}

// V returns the units produced from the origin to elapsed time t. It
// requires 0 <= t <= Horizon and is non-decreasing in t.
func (p *Params) V(t int64) int64 {
	hi, _ := bits.Mul64(uint64(t), p.f)
	return int64(uint64(t)*p.w + hi)
}

// Refill returns the balance at elapsed time now of a balance that was
// tokens at elapsed time last, capped at the capacity, and the time to store
// with it. A reading at or before last adds nothing and returns last
// unchanged, so stale readings never add tokens nor move time back.
func (p *Params) Refill(tokens, last, now int64) (balance, at int64) {
	if now <= last {
		return tokens, last
	}
	add := p.V(now) - p.V(last)
	if add >= p.Cap-tokens {
		return p.Cap, now
	}
	return tokens + add, now
}

// Target returns V(at) + deficit, the stream value at which a balance short
// by deficit units at elapsed time at is covered, and false if the stream
// never reaches it within the horizon.
func (p *Params) Target(at, deficit int64) (int64, bool) {
	v := p.V(at) + deficit // no overflow: V <= 2^62 and deficit <= 2^61 + 2^62
	return v, v <= p.V(Horizon)
}

// Wake returns the elapsed time at which a balance of bal as of elapsed
// time at (at least the current time) will cover need, and false if it
// never will: too deep in debt, or beyond the horizon. It is the wait
// computation of the single-balance buckets.
func (p *Params) Wake(bal, at, need int64) (int64, bool) {
	deficit, ok := Deficit(bal, need)
	if !ok {
		return 0, false
	}
	target, ok := p.Target(at, deficit)
	if !ok {
		return 0, false
	}
	return p.When(at, target), true
}

// When returns the smallest elapsed time t >= from with V(t) >= v, or
// Horizon+1 when no t within the horizon qualifies (always so for rate 0).
// It is for computing waits, not for hot paths.
func (p *Params) When(from, v int64) int64 {
	if p.V(from) >= v {
		return from
	}
	if p.zero || p.V(Horizon) < v {
		return Horizon + 1
	}
	lo, hi := from, Horizon // V(lo) < v <= V(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if p.V(mid) >= v {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
