package windowtest

import "time"

// AlignedBound is the bound of a limiter that admits at most limit in each
// aligned window (fixedwindow, slidingwindow): a span of length span
// overlaps at most 1 + ⌈(span−1)/window⌉ aligned windows.
func AlignedBound(limit int64, window, span time.Duration, _ int64) int64 {
	if span <= 0 {
		return 0
	}
	w := int64(window)
	return limit * (1 + (int64(span)-1+w-1)/w)
}

// SlidingBound is the bound of an exact sliding window (slidinglog): at
// most limit in every span of length window, so ⌈span/window⌉ × limit.
func SlidingBound(limit int64, window, span time.Duration, _ int64) int64 {
	if span <= 0 {
		return 0
	}
	w := int64(window)
	return limit * ((int64(span) + w - 1) / w)
}

// PacedBound is the bound of a limiter whose admissions are spaced by their
// size at limit per window (leakybucket): ⌊limit × span / window⌋ + maxN.
// The product is taken in floating point, which is exact for the suite's
// spans and overstates by far less than one otherwise.
func PacedBound(limit int64, window, span time.Duration, maxN int64) int64 {
	if span <= 0 {
		return 0
	}
	return int64(float64(limit)*float64(span)/float64(window)) + maxN
}
