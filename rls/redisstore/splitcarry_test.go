package redisstore_test

import (
	"testing"

	"github.com/admit-go/admit/rls/memstore"
)

// TestSplitFullKeyCarriedInRequest: a full (absent) key K takes 4 under L
// (burst 10) and, in the same request, is peeked under S (burst 5): the
// take leaves 6 of 10, clamped to 5 of 5 and stored marked. Another master
// refuses the request. The refused request must leave K as it found it
// (absent: 10 of 10), as memory and a single Redis do. A give-back that
// returned tokens under S found the mark and kept it: K read 5 of 10 for
// good (never refilling), the refused request took 5.
func TestSplitFullKeyCarriedInRequest(t *testing.T) {
	cs, c, pfx := splitStore(t)
	for _, tc := range []struct {
		name   string
		k      string
		h1, h2 int64 // capacities of the take (4, or 1) and the peek
	}{{"take L then peek S", "sfk1", 10, 5}, {"take S then peek L", "sfk2", 5, 10}} {
		k := tc.k
		j := otherMaster(t, c, pfx, k)
		for _, b := range []backend{{"memstore", memstore.New()}, {"redis-single", singleStore(t)}, {"redis-cluster", cs}} {
			decide1(t, b.s, rh(j, 1, 0, 1)) // J empty
			a, _ := decide1(t, b.s, rh(k, tc.h1, 0, 4), rh(k, tc.h2, 0, 0), rh(j, 1, 0, 1))
			_, r := decide1(t, b.s, rh(k, 10, 0, 0))
			t.Logf("%s, %s: admitted=%v, then K under 10: %d left (want 10)", tc.name, b.name, a, r[0].Remaining)
			if a || r[0].Remaining != 10 {
				t.Errorf("%s, %s: a refused request left K at %d of 10, want 10", tc.name, b.name, r[0].Remaining)
			}
		}
	}
}
