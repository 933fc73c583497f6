package buckettest

import (
	"math"
	"math/big"
	"math/bits"
	"strconv"
)

// Stream is a reference for the stream of refill units the token buckets,
// gcra and leakybucket share (internal/refill), written from that
// package's doc with big integers rather than from its code: the unit, and
// V(t), the units produced in the first t nanoseconds. Walk's model and
// leakybucket's walk are built on it.
type Stream struct {
	Shift uint     // a unit is 2^-Shift tokens
	R     *big.Int // the rate in units per ns, times 2^64, rounded up; 0 for rate 0
}

// StreamHorizon is the latest elapsed time Reach reports; later is never.
const StreamHorizon = int64(1) << 62

// NewStream picks the unit as internal/refill's doc says: the finest with
// capacity·2^k < 2^61 and a refill of at most one unit a ns.
func NewStream(capacity int64, rate float64) Stream {
	k := uint(61 - bits.Len64(uint64(capacity)))
	s := Stream{R: new(big.Int)}
	if rate > 0 {
		dec, _ := new(big.Rat).SetString(strconv.FormatFloat(rate, 'g', -1, 64))
		for ; ; k-- {
			perNs := new(big.Rat).Mul(dec, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), k)))
			perNs.Quo(perNs, big.NewRat(1e9, 1))
			if perNs.Cmp(big.NewRat(1, 1)) <= 0 || k == 0 {
				num := new(big.Int).Lsh(perNs.Num(), 64)
				q, rem := new(big.Int).QuoRem(num, perNs.Denom(), new(big.Int))
				if rem.Sign() != 0 {
					q.Add(q, big.NewInt(1))
				}
				s.R = q
				break
			}
		}
	}
	s.Shift = k
	return s
}

// V is V(t) = ⌊t·R / 2^64⌋.
func (s Stream) V(t int64) int64 {
	p := new(big.Int).Mul(big.NewInt(t), s.R)
	return p.Rsh(p, 64).Int64()
}

// Tokens is u units in tokens, rounded down to a float64, as a
// limiter's Tokens reports them: ⌊Tokens(u)⌋ is then the whole tokens in u
// (to nearest, a balance a few units short of n tokens read as n once a
// token is more than 2^53 units).
func (s Stream) Tokens(u int64) float64 {
	f, _ := new(big.Float).SetPrec(53).SetMode(big.ToNegativeInf).SetInt64(u).Float64()
	return math.Ldexp(f, -int(s.Shift))
}

// Reach is the first t >= 0 with V(t) >= target, or StreamHorizon+1 if
// none is (always so for rate 0).
func (s Stream) Reach(target int64) int64 {
	if s.R.Sign() == 0 {
		return StreamHorizon + 1
	}
	num := new(big.Int).Lsh(big.NewInt(target), 64)
	q, rem := new(big.Int).QuoRem(num, s.R, new(big.Int))
	if rem.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() || q.Int64() > StreamHorizon {
		return StreamHorizon + 1
	}
	return max(q.Int64(), 0)
}
