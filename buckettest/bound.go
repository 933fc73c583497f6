package buckettest

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
)

// Bound checks, admission by admission, that no window [t1, t2] holds more
// than capacity + rate × (t2 − t1) + 1 tokens: the bound every token bucket
// in this module promises. With P the tokens admitted so far, that is
// P(t2) − P(before t1) − rate·(t2 − t1) <= capacity + 1 for every t1 <= t2,
// so it keeps the minimum over t1 of P(before t1) − rate·t1. The arithmetic
// is exact: the rate is the rational its decimal form names, and time is in
// nanoseconds. Admissions must be recorded in non-decreasing time order;
// CheckAdmissions sorts a recorded list first. AdmitWithin takes an
// admission whose time is known only to an interval, for real-clock tests.
//
// The zero value is not usable; create one with NewBound. A Bound is not
// safe for concurrent use.
type Bound struct {
	limit  *big.Rat // capacity + 1
	rate   *big.Rat // tokens per ns
	total  int64
	best   *big.Rat // min over admissions so far of P(before it) − rate·lo
	last   int64    // the latest hi
	lastLo int64    // the latest lo
}

// NewBound returns a Bound for a bucket of capacity tokens refilling at rate
// tokens per second.
func NewBound(capacity int64, rate float64) *Bound {
	r, _ := new(big.Rat).SetString(strconv.FormatFloat(rate, 'g', -1, 64))
	return &Bound{limit: big.NewRat(capacity+1, 1), rate: r.Quo(r, big.NewRat(1e9, 1)), last: math.MinInt64, lastLo: math.MinInt64}
}

// Admit records n tokens admitted at time now (nanoseconds on any fixed
// origin) and reports whether every window ending at now respects the
// bound. It panics if now is before an admission already recorded: that is
// a bug in the test, not in the limiter.
func (w *Bound) Admit(now, n int64) bool { return w.AdmitWithin(now, now, n) }

// AdmitWithin records n tokens admitted at a time known only to lie in
// [lo, hi], and reports whether the bound can hold: for every earlier
// admission i, the tokens from i to this one are at most
// capacity + rate × (hi − lo_i) + 1. That is what the exact bound implies
// whatever the true times were, so long as they did not decrease. Neither lo
// nor hi may decrease from one call to the next; it panics if one does.
func (w *Bound) AdmitWithin(lo, hi, n int64) bool {
	if lo > hi || hi < w.last || lo < w.lastLo {
		panic(fmt.Sprintf("buckettest: Bound.AdmitWithin(%d, %d) after (%d, %d)", lo, hi, w.lastLo, w.last))
	}
	w.lastLo, w.last = lo, hi
	rlo := new(big.Rat).Mul(w.rate, new(big.Rat).SetInt64(lo))
	start := new(big.Rat).Sub(new(big.Rat).SetInt64(w.total), rlo) // P(before) − rate·lo
	if w.best == nil || start.Cmp(w.best) < 0 {
		w.best = start
	}
	w.total += n
	rhi := new(big.Rat).Mul(w.rate, new(big.Rat).SetInt64(hi))
	end := new(big.Rat).Sub(new(big.Rat).SetInt64(w.total), rhi) // P(now) − rate·hi
	return new(big.Rat).Sub(end, w.best).Cmp(w.limit) <= 0
}

// Admission is n tokens admitted at time At.
type Admission struct {
	At, N int64
}

// CheckAdmissions returns an error naming the first window that holds more
// than capacity + rate × its length + 1 tokens, or nil. It sorts the
// admissions by time, so they may be recorded in any order (a blocked
// caller counts at its wake time, which may be reported late).
func CheckAdmissions(capacity int64, rate float64, adm []Admission) error {
	adm = slices.Clone(adm)
	slices.SortStableFunc(adm, func(a, b Admission) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	w := NewBound(capacity, rate)
	for i, a := range adm {
		if !w.Admit(a.At, a.N) {
			return fmt.Errorf("admission %d (%d tokens at %d ns) ends a window holding more than capacity %d + %v/s × its length + 1; admissions so far: %v",
				i, a.N, a.At, capacity, rate, adm[:i+1])
		}
	}
	return nil
}
