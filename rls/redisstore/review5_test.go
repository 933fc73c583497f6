package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
)

// TestReview5NegativeN: rls.Store's rules 1 and 4: a negative N is never
// held, so a request whose enforced hit asks a negative N is refused. The
// script reads a negative n as a give-back (ok = 1, the request stays
// admitted), so the Redis store admitted such a request while reporting
// the hit not OK; memstore refuses it.
func TestReview5NegativeN(t *testing.T) {
	h := rls.Hit{Key: "neg", Capacity: 10, Count: 1, Period: time.Hour, N: -1}
	for _, b := range []struct {
		name string
		s    rls.Store
	}{{"memstore", memstore.New()}, {"redis-single", singleStore(t)}, {"redis-cluster", clusterStore(t)}} {
		res := make([]rls.Result, 1)
		a, err := b.s.Decide(context.Background(), []rls.Hit{h}, res)
		if err != nil {
			t.Fatal(err)
		}
		if a || res[0].OK {
			t.Errorf("%s: a hit of N = -1 (not shadow): admitted %v, OK %v; want refused", b.name, a, res[0].OK)
		}
	}
}
