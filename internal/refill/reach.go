package refill

import "math/bits"

// Reach returns the same as When, the smallest elapsed time t >= from with
// V(t) >= v, or Horizon+1 when no t within the horizon qualifies, in
// constant time, for hot paths that report waits (the keyed limiter computes
// one on every call).
//
// V(t) = t·w + ⌊t·f/2^64⌋ = ⌊t·R/2^64⌋ with R = w·2^64 + f, and R <= 2^64
// because the rate is at most one unit per ns (w == 1 only with f == 0). So
// V(t) >= v exactly when t·R >= v·2^64, that is t >= ⌈v·2^64 / R⌉: one
// 128-by-64-bit division.
func (p *Params) Reach(from, v int64) int64 {
	if p.V(from) >= v {
		return from
	}
	if p.zero {
		return Horizon + 1
	}
	// v > V(from) >= 0 here.
	var t uint64
	if p.w == 1 {
		t = uint64(v) // R = 2^64: V(t) = t
	} else {
		if uint64(v) >= p.f {
			return Horizon + 1 // the quotient is 2^64 or more, past the horizon
		}
		q, r := bits.Div64(uint64(v), 0, p.f)
		if r != 0 {
			q++
		}
		t = q
	}
	if t > uint64(Horizon) {
		return Horizon + 1
	}
	return max(int64(t), from)
}
