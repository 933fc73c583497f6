package buckettest

import (
	"fmt"
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
// Check sorts a recorded list first.
//
// The zero value is not usable; create one with NewBound. A Bound is not
// safe for concurrent use.
type Bound struct {
	limit *big.Rat // capacity + 1
	rate  *big.Rat // tokens per ns
	last  int64
	total int64
	best  *big.Rat // min over admissions so far of P(before it) − rate·t
}

// NewBound returns a Bound for a bucket of capacity tokens refilling at rate
// tokens per second.
func NewBound(capacity int64, rate float64) *Bound {
	r, _ := new(big.Rat).SetString(strconv.FormatFloat(rate, 'g', -1, 64))
	return &Bound{limit: big.NewRat(capacity+1, 1), rate: r.Quo(r, big.NewRat(1e9, 1))}
}

// Admit records n tokens admitted at time now (nanoseconds on any fixed
// origin) and reports whether every window ending at now respects the
// bound. It panics if now is before an admission already recorded: that is
// a bug in the test, not in the limiter.
func (w *Bound) Admit(now, n int64) bool {
	if w.best != nil && now < w.last {
		panic(fmt.Sprintf("buckettest: Bound.Admit(%d) after an admission at %d", now, w.last))
	}
	w.last = now
	rt := new(big.Rat).Mul(w.rate, new(big.Rat).SetInt64(now))
	start := new(big.Rat).Sub(new(big.Rat).SetInt64(w.total), rt) // P(before) − rate·now
	if w.best == nil || start.Cmp(w.best) < 0 {
		w.best = start
	}
	w.total += n
	end := new(big.Rat).Sub(new(big.Rat).SetInt64(w.total), rt) // P(now) − rate·now
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
