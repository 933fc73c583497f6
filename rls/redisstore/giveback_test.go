package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/admit-go/admit/rls"
)

// TestGiveBackRefilled: no second limit at all. A key one token down
// (not full) takes 5 in a split request that another node refuses; refill
// during the round trips repays the rest, so the give-back brings it to
// debt 0, a full bucket. A give-back must then delete it; one version
// kept the take's state for any bucket not full before the take, and the
// refused request's take stood. Relies only on at least 1.5 s passing.
func TestGiveBackRefilled(t *testing.T) {
	s, _, _ := singleStoreOf(t)
	ctx := context.Background()
	h := rls.Hit{Key: "gb", Capacity: 10, Count: 1, Period: time.Second, N: 1}
	res := make([]rls.Result, 1)
	if _, err := s.Decide(ctx, []rls.Hit{h}, res); err != nil {
		t.Fatal(err)
	}
	h.N = 5
	tk := take(t, s, h)
	time.Sleep(1500 * time.Millisecond)
	r := giveBack(t, s, h, tk)
	h.N = 0
	s.Decide(ctx, []rls.Hit{h}, res)
	t.Logf("give-back reports %d remaining; a peek after: %d (want 10)", r.Remaining, res[0].Remaining)
	if res[0].Remaining < 9 {
		t.Errorf("after a give-back the key has %d of 10: the refused request's take stood", res[0].Remaining)
	}
}
