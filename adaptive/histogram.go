package adaptive

import "math/bits"

// histogram counts latencies in log-linear buckets: 16 per power of two, so
// a bucket spans at most 1/16 of its lower bound and its midpoint is within
// ±3.2% of any value counted in it. It covers every
// int64 of nanoseconds in histBuckets buckets (3.9 KiB of uint32 counts). A
// window clears only the range [lo, hi] it touched.
type histogram struct {
	n      int
	lo, hi int // touched index range; lo > hi when empty
	counts [histBuckets]uint32
}

const (
	histSub     = 16 // buckets per power of two
	histBuckets = histSub * 61
)

// bucketOf returns v's bucket: v itself below 16, else 16 buckets per
// octave, indexed by the top five bits of v.
func bucketOf(v int64) int {
	if v < histSub {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 5 // v >> e is in [16, 32)
	return histSub*e + int(v>>e)
}

// bucketMid returns the midpoint of bucket i's range.
func bucketMid(i int) float64 {
	if i < histSub {
		return float64(i)
	}
	e := i/histSub - 1
	lower := int64(i%histSub+histSub) << e
	return float64(lower) + float64(int64(1)<<e)/2
}

func (h *histogram) reset() {
	if h.n > 0 {
		clear(h.counts[h.lo : h.hi+1])
	}
	h.n, h.lo, h.hi = 0, histBuckets, -1
}

func (h *histogram) add(v int64) {
	i := bucketOf(v)
	h.counts[i]++
	h.n++
	h.lo = min(h.lo, i)
	h.hi = max(h.hi, i)
}

// lowerMean returns the mean of the smallest ⌈q·n⌉ values (0 < q <= 1),
// each taken at its bucket's midpoint; 0 when empty. Leaving out the top
// 1-q makes it robust to a heavy tail, and unlike a quantile it moves
// smoothly with a shift of every value: the queueing delay.
func (h *histogram) lowerMean(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	keep := uint32(max(1, int(q*float64(h.n)+0.999999)))
	var seen uint32
	sum := 0.0
	for i := h.lo; i <= h.hi && seen < keep; i++ {
		c := min(h.counts[i], keep-seen)
		seen += c
		sum += float64(c) * bucketMid(i)
	}
	return sum / float64(seen)
}

// lowestPositive returns the lowest bucket above 0 that holds a value,
// histBuckets if none does.
func (h *histogram) lowestPositive() int {
	for i := max(h.lo, 1); i <= h.hi; i++ {
		if h.counts[i] > 0 {
			return i
		}
	}
	return histBuckets
}
