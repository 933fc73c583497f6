package admit

import (
	"math"
	"strings"
	"testing"
)

// FuzzValid checks that valid, ValidateLimits' fast check, agrees with
// Validate on every Limit: a disagreement would let a bad limit through or
// refuse a good one without an error that says why.
func FuzzValid(f *testing.F) {
	for _, c := range []struct {
		name     string
		capacity int64
		rate     float64
	}{
		{"", 1, 0}, {"daily", 1e9, 1e9}, {"a b-c_d.e/f", 1, 1e-6}, {strings.Repeat("x", 128), 5, 1},
		{"", 0, 1}, {"", -3, 1}, {"", 1 << 61, 1}, {"", 1<<61 - 1, 1}, {"", 1, -1}, {"", 1, math.NaN()},
		{"", 1, math.Inf(1)}, {"", 1, math.Inf(-1)}, {"", 1, 2e9}, {"", 1, math.Nextafter(1e9, 2e9)},
		{"", 1, math.Copysign(0, -1)}, {"", 1, -math.SmallestNonzeroFloat64}, {"tab\there", 1, 1},
		{"é", 1, 1}, {"\x7f", 1, 1}, {" ~", 1, 1}, {strings.Repeat("x", 129), 1, 1},
	} {
		f.Add(c.name, c.capacity, c.rate)
	}
	f.Fuzz(func(t *testing.T, name string, capacity int64, rate float64) {
		l := Limit{Name: name, Capacity: capacity, Rate: rate}
		if err := l.Validate(); l.valid() != (err == nil) {
			t.Fatalf("%+v: valid() = %v, Validate() = %v", l, l.valid(), err)
		}
	})
}
