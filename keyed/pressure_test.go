package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
)

// TestConcurrentPressure: 8 goroutines on 24 keys past WithMaxKeys(8),
// calls bringing changing limit sets (carry-overs between capacities) at rate
// 0 or 1e-6 (no token in the test's time), so that no bucket taken from is ever full again: under RefuseNew no
// key taken from is ever forgotten, and each (key, Name) admits at most its
// largest capacity in all; under EvictLRU the bound holds per eviction.
func TestConcurrentPressure(t *testing.T) {
	for _, refuse := range []bool{true, false} {
		for _, shards := range []int{1, 4} {
			t.Run(fmt.Sprint("refuse=", refuse, "/shards=", shards), func(t *testing.T) {
				opts := []admit.Option{keyed.WithMaxKeys(8), keyed.WithShards(shards)}
				if refuse {
					opts = append(opts, keyed.WithPolicy(keyed.RefuseNew))
				}
				l, err := keyed.NewLimits([]admit.Limit{{Name: "", Capacity: 4, Rate: 0}}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				// Carry-overs between rates only: a clamp to a smaller capacity
				// can make a bucket full, and full carries back as full (the
				// documented rule), which would lift the no-refill bound.
				variants := [][]admit.Limit{
					{{Name: "a", Capacity: 5, Rate: 0}, {Name: "a", Capacity: 5, Rate: 1e-6}},
					{{Name: "b", Capacity: 5, Rate: 1e-6}, {Name: "b", Capacity: 5, Rate: 0}},
					{{Name: "", Capacity: 4, Rate: 0}, {Name: "", Capacity: 4, Rate: 1e-6}},
				}
				const keys = 24
				var adm [keys][3]atomic.Int64
				var wg sync.WaitGroup
				for g := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := rand.New(rand.NewPCG(uint64(g), 1))
						for range 5000 {
							k := r.IntN(keys)
							key := fmt.Sprint("key", k)
							var lims []admit.Limit
							var idx []int
							for _, i := range r.Perm(3)[:1+r.IntN(3)] {
								lims = append(lims, variants[i][r.IntN(2)])
								idx = append(idx, i)
							}
							n := int64(r.IntN(4)) - 1
							var d admit.Decision
							var err error
							if r.IntN(4) == 0 {
								d, err = l.AllowN(context.Background(), key, n)
								idx = []int{2} // AllowN decides by the limiter's own limit, variant 2's Name
							} else {
								d, err = l.AllowLimits(context.Background(), key, n, lims...)
							}
							if l.Len() > 8 {
								t.Errorf("Len %d", l.Len())
								return
							}
							if err != nil {
								if !errors.Is(err, admit.ErrUnavailable) && !errors.Is(err, admit.ErrUnsatisfiable) || d.Allowed {
									t.Errorf("err %v %+v", err, d)
									return
								}
								continue
							}
							if d.Allowed && n > 0 {
								for _, i := range idx {
									adm[k][i].Add(n)
								}
							}
						}
					}()
				}
				wg.Wait()
				if refuse {
					for k := range keys {
						for i := range 3 {
							if got := adm[k][i].Load(); got > 6 {
								t.Errorf("key %d name %d admitted %d > 5 + 1 with no refill", k, i, got)
							}
						}
					}
				}
				t.Logf("stats %+v", l.Stats())
			})
		}
	}
}
