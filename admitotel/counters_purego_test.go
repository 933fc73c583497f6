//go:build admit_purego

package admitotel

import (
	"sync/atomic"
	"testing"
)

// TestSlotsSpread: the purego build draws a random slot for each count;
// its adds spread over the slots instead of all landing on the last one
// (a random 64-bit draw clamped to the slots nearly always was it).
func TestSlotsSpread(t *testing.T) {
	c := newCounters()
	for range 10000 {
		c.add(allowed, 1, false, "")
	}
	used := 0
	for i := range c.slots {
		if atomic.LoadUint64(&c.slots[i].decisions[allowed]) != 0 {
			used++
		}
	}
	if used < min(len(c.slots), 2) {
		t.Fatalf("10000 adds landed in %d of %d slots", used, len(c.slots))
	}
}
