package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
)

// TestScriptMatchesMemory runs the same random requests on a Redis store
// and on a memory store whose clock stands still, and requires the same
// outcome, hit by hit: admitted, OK and Remaining. The rules refill at
// most a token every few hours, so Redis's running clock adds no whole
// token; they reach the arithmetic's edges (bursts of 1 and 2^32 − 1, a
// burst of 10^8 at one a year, which Redis refuses, rules that never
// refill, limits of zero), costs of 0, the burst, one more and 2^40, shadow
// and debt hits, and four keys, so that one key often comes under two
// limits in one request. On a Cluster a request's keys span nodes and
// take the split path: decided key by key, given back on a refusal.
func TestScriptMatchesMemory(t *testing.T) {
	const year = 365 * 24 * time.Hour
	limits := []struct {
		capacity, count int64
		period          time.Duration
	}{
		{1, 1, year}, {2, 1, year}, {1 << 20, 1000, year}, {4294967295, 1000, year},
		{100000000, 1, year}, {3, 3, year}, {7, 0, year}, {4294967295, 0, year},
		{10, 10, year}, {0, 0, year}, {1000, 999, year}, {65537, 1, 30 * 24 * time.Hour},
	}
	for _, tc := range []struct {
		name  string
		store func(*testing.T) rls.Store
		steps int
	}{{"single", singleStore, 4000}, {"cluster", clusterStore, 4000}} {
		t.Run(tc.name, func(t *testing.T) {
			rs := tc.store(t)
			ms := memstore.New(memstore.WithClock(buckettest.NewFakeClock(0)))
			rnd := rand.New(rand.NewPCG(3, 4))
			compared := 0
			for step := range tc.steps {
				hits := make([]rls.Hit, 1+rnd.IntN(4))
				for i := range hits {
					l := limits[rnd.IntN(len(limits))]
					cost := rnd.Int64N(4) + 1
					switch rnd.IntN(6) {
					case 0:
						cost = 0
					case 1:
						cost = l.capacity
					case 2:
						cost = l.capacity + 1
					case 3:
						cost = 1 << 40
					}
					hits[i] = rls.Hit{Key: fmt.Sprint("k", rnd.IntN(4)), Capacity: l.capacity, Count: l.count, Period: l.period,
						N: cost, Shadow: rnd.IntN(6) == 0, Debt: rnd.IntN(3) == 0 && l.capacity > 0}
				}
				fits := true
				for _, h := range hits {
					fits = fits && rs.Check(h) == nil && ms.Check(h) == nil
				}
				if !fits {
					continue
				}
				compared++
				mr, rr := make([]rls.Result, len(hits)), make([]rls.Result, len(hits))
				ma, err := ms.Decide(context.Background(), hits, mr)
				if err != nil {
					t.Fatal(err)
				}
				ra, err := rs.Decide(context.Background(), hits, rr)
				if err != nil {
					t.Fatal(err)
				}
				same := ma == ra
				for i := range hits {
					same = same && mr[i].OK == rr[i].OK && mr[i].Remaining == rr[i].Remaining
				}
				if !same {
					t.Fatalf("step %d: hits %+v\nmemory admitted %v %+v\nredis  admitted %v %+v", step, hits, ma, mr, ra, rr)
				}
			}
			t.Logf("%d requests compared of %d", compared, tc.steps)
		})
	}
}
