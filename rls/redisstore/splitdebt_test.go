package redisstore_test

import (
	"testing"

	"github.com/admit-go/admit/rls/memstore"
)

// TestSplitGiveBackAfterClampAndDebt: a full key K takes 3 under L (burst
// 10), then in the same request is charged 4 under S (burst 5, a debt
// hit); another master refuses. What stands is the charge alone: 5 - 4 = 1
// left under S (memory, single Redis). On the Cluster the take left 7 of
// 10, the carry clamped it to 5 (the take's 3 tokens gone in the clamp),
// the charge left 1, and a give-back that returned the 3 under S, bounded
// only by the debt the charge left (4), left K at 4 of 5: 3 more than the
// refused request left, an over-admission of 3 each round.
func TestSplitGiveBackAfterClampAndDebt(t *testing.T) {
	cs, c, pfx := splitStore(t)
	k := "sgd"
	j := otherMaster(t, c, pfx, k)
	for _, b := range []backend{{"memstore", memstore.New()}, {"redis-single", singleStore(t)}, {"redis-cluster", cs}} {
		decide1(t, b.s, rh(j, 1, 0, 1)) // J empty
		a, _ := decide1(t, b.s, rh(k, 10, 0, 3), withFlags(rh(k, 5, 0, 4), false, true), rh(j, 1, 0, 1))
		_, r := decide1(t, b.s, rh(k, 5, 0, 0))
		t.Logf("%s: admitted=%v, then K under 5: %d left (want 1)", b.name, a, r[0].Remaining)
		if a || r[0].Remaining != 1 {
			t.Errorf("%s: a refused request left K at %d of 5, want 1", b.name, r[0].Remaining)
		}
	}
}
