// Package tick implements the exact integer arithmetic of admit-rls's
// token buckets. The memory store runs it in Go; the Redis store computes
// the same Params here and runs the same steps in its Lua script.
//
// # Units
//
// A rule is requests_per_unit (count) per unit (a period of whole seconds)
// with a burst (capacity). Time is counted in ticks of Q base units
// (nanoseconds in memory, microseconds on Redis), Q the finest power of ten
// up to one second that keeps every number in range. A token is Per units
// and a tick refills M units, Per/M being the ticks per token, reduced: so
// refill is exact. After T whole ticks a bucket has gained exactly T·M
// units, count tokens per period, never early and never drifting; a token
// is credited at the first tick boundary at or after the instant it is
// due, at most one tick late. A take within a tick, though, is refilled
// from the tick's start: after a bucket is drained mid-tick, the next
// boundary credits the whole tick's M units, up to M more than a bucket
// refilled continuously would hold (below 20·M/limit of the capacity,
// since only a capacity near limit makes New pick a coarse tick).
//
// # State
//
// A bucket is its debt D, capacity minus balance in units, as of tick T; an
// absent bucket is a full one (D = 0). D lies in [0, 2·CapU]: a balance
// from the capacity down to minus one burst. Only two things take a
// balance below zero: a charge (a hit of a rule with debt: true, which is
// charged whatever the outcome) and a carry-over of such a balance into
// another limit, which keeps it, so that no change of limit forgives
// counted usage. Every bucket has that range, whether or not its rule
// charges, so Params do not depend on debt. A reading at or before T
// refills nothing and never moves T back.
package tick

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/admit-go/admit"
)

// Params is a bucket's arithmetic. Two limits with equal Params behave
// alike, so a store compares Params, not the limits they came from.
type Params struct {
	CapU int64 // capacity in units: capacity × Per
	Per  int64 // units per token
	M    int64 // units refilled per tick; 0 for a rule that never refills
	Q    int64 // base units per tick
}

// New computes the Params of capacity tokens refilled count per period
// (whole seconds; count 0 never refills), with time in ticks of base (a
// power of ten of nanoseconds, at most a second), such that MaxDebt
// (2·CapU) is at most limit. It picks the finest tick that fits; at the
// coarsest, a second, Per is at most the period's seconds. Errors wrap
// admit.ErrInvalidConfig and name the value.
func New(capacity, count int64, period time.Duration, base time.Duration, limit int64) (Params, error) {
	switch {
	case capacity < 1 || capacity > 1<<32:
		return Params{}, fmt.Errorf("%w: capacity %d is outside [1, 2^32]", admit.ErrInvalidConfig, capacity)
	case count < 0 || count > 1<<32:
		return Params{}, fmt.Errorf("%w: count %d is outside [0, 2^32]", admit.ErrInvalidConfig, count)
	case period < time.Second || period%time.Second != 0:
		return Params{}, fmt.Errorf("%w: period %v is not a whole number of seconds", admit.ErrInvalidConfig, period)
	}
	const factor = 2 // MaxDebt is 2·CapU
	if count == 0 {
		// No refill: the tick only timestamps; a token is one unit.
		if capacity > limit/factor {
			return Params{}, fmt.Errorf("%w: capacity %d does not fit", admit.ErrInvalidConfig, capacity)
		}
		return Params{CapU: capacity, Per: 1, Q: int64(time.Second / base)}, nil
	}
	perBase := int64(period / base) // base units per period
	for q := int64(1); q <= int64(time.Second/base); q *= 10 {
		ticks := perBase / q // a whole number: the period is whole seconds
		g := gcd(ticks, count)
		per, m := ticks/g, count/g
		if per <= limit/factor/capacity {
			return Params{CapU: capacity * per, Per: per, M: m, Q: q}, nil
		}
	}
	secs := int64(period / time.Second)
	per := secs / gcd(secs, count)
	return Params{}, fmt.Errorf("%w: %d per %v with burst %d does not fit: burst × %d (the unit's seconds over their gcd with requests_per_unit) must be at most %d",
		admit.ErrInvalidConfig, count, period, capacity, per, limit/factor)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// MaxDebt is the most debt the bucket may hold: 2·CapU, a balance of
// minus one burst.
func (p *Params) MaxDebt() int64 { return 2 * p.CapU }

// Refill returns debt d of tick t advanced to tick now.
func (p *Params) Refill(d, t, now int64) (int64, int64) {
	if now <= t {
		return d, t
	}
	if p.M == 0 || d == 0 {
		return d, now
	}
	// dt·M is computed only below ⌈d/M⌉ ticks, so it stays below d + M.
	if dt := now - t; dt < cdiv(d, p.M) {
		return d - dt*p.M, now
	}
	return 0, now
}

// Holds reports whether a bucket of debt d holds n tokens: n ≥ 0 and a
// balance of at least n (so in debt it holds nothing, not even 0).
func (p *Params) Holds(d, n int64) bool {
	return n >= 0 && n <= p.CapU/p.Per && n*p.Per <= p.CapU-d
}

// Take returns the debt after taking n tokens that Holds(d, n) reported.
func (p *Params) Take(d, n int64) int64 { return d + n*p.Per }

// Charge returns the debt after charging n ≥ 0 tokens whether or not the
// bucket holds them, at most MaxDebt.
func (p *Params) Charge(d, n int64) int64 {
	limit := p.MaxDebt()
	if n > (limit-d)/p.Per {
		return limit
	}
	return d + n*p.Per
}

// Remaining returns the whole tokens of a bucket of debt d, 0 when in debt.
func (p *Params) Remaining(d int64) int64 { return max(0, (p.CapU-d)/p.Per) }

// Full returns the ticks from a bucket's tick until debt d is repaid, and
// false if it never will be (M = 0).
func (p *Params) Full(d int64) (int64, bool) {
	if d == 0 {
		return 0, true
	}
	if p.M == 0 {
		return 0, false
	}
	return cdiv(d, p.M), true
}

// Carry returns the debt, in p's units, that a bucket of old's arithmetic
// with debt d (already refilled to the carry's instant) carries into p:
// its balance in tokens, fraction included (rounded down to p's units),
// clamped to p's range, from the new capacity down to minus the new
// capacity. So raising a limit keeps the balance and refills it at the new
// rate from then on, lowering one never gives tokens back, and a balance
// below zero (usage charged by a debt rule) stays owed under the new limit,
// down to its own bound of one burst. A full bucket (d = 0) is the same as
// an absent one and stays full: it carries no debt into the new limit.
func (p *Params) Carry(old *Params, d int64) int64 {
	if d == 0 {
		return 0
	}
	return p.CarryBalance(old, d)
}

// CarryBalance is Carry without its rule for a full bucket: a full bucket
// carries its balance, old's burst, clamped to p's. It is for a bucket
// that may be full only because a carry just clamped it to a smaller burst.
func (p *Params) CarryBalance(old *Params, d int64) int64 {
	b := old.CapU - d // in [−old.CapU, old.CapU]
	whole := floorDiv(b, old.Per)
	frac := b - whole*old.Per // in [0, old.Per)
	capacity := p.CapU / p.Per
	low := -capacity
	switch {
	case whole >= capacity:
		return 0
	case whole < low:
		return p.MaxDebt()
	}
	hi, lo := bits.Mul64(uint64(frac), uint64(p.Per))
	f, _ := bits.Div64(hi, lo, uint64(old.Per)) // < p.Per: frac < old.Per
	nb := whole*p.Per + int64(f)
	return p.CapU - min(nb, p.CapU)
}

func cdiv(a, b int64) int64 { return (a + b - 1) / b }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
