package keyed_test

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
)

type cAdm struct{ lo, hi, n int64 }

// checkIntervals: for every A in {lo}, B in {hi}, the admissions whose
// interval lies inside [A, B] hold at most Cap + rate·(B−A) + 1.
func checkIntervals(lim admit.Limit, adm []cAdm) error {
	rate := ratOf(lim.Rate)
	rate.Quo(rate, big.NewRat(1e9, 1))
	sort.Slice(adm, func(i, j int) bool { return adm[i].lo < adm[j].lo })
	for i := range adm {
		A := adm[i].lo
		// admissions with lo >= A, sorted by hi
		in := append([]cAdm(nil), adm[i:]...)
		sort.Slice(in, func(x, y int) bool { return in[x].hi < in[y].hi })
		sum := int64(0)
		for _, a := range in {
			sum += a.n
			B := a.hi
			bound := new(big.Rat).Mul(rate, new(big.Rat).SetInt64(B-A))
			bound.Add(bound, big.NewRat(lim.Capacity+1, 1))
			if new(big.Rat).SetInt64(sum).Cmp(bound) > 0 {
				return fmt.Errorf("limit %+v: %d tokens within [%d, %d] (%d ns), bound %s", lim, sum, A, B, B-A, bound.FloatString(3))
			}
		}
	}
	return nil
}

// TestModelWalkConcurrent: four goroutines share one limiter under
// RefuseNew with a small key bound, random Name subsets and AllowN, moving
// the fake clock themselves, so that a reading is often stale by the time
// its call decides; every admission is recorded with the clock read before
// and after its call, and every window of every (key, Name) is checked
// against capacity + rate × its widest span + 1. Ten seeds (KEYED_WALKS
// chooses another count).
func TestModelWalkConcurrent(t *testing.T) {
	for seed := range uint64(walkCount(10)) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var limsByName = map[string]admit.Limit{}
		names := []string{"", "a", "b"}
		for _, nm := range names {
			limsByName[nm] = randLimit(rng, nm)
		}
		if limsByName[""].Rate == 0 || limsByName[""].Rate < 0.1 {
			limsByName[""] = admit.Limit{Capacity: limsByName[""].Capacity, Rate: 3}
		}
		clk := buckettest.NewFakeClock(0)
		maxKeys := 1 + rng.IntN(3)
		l, err := keyed.New(limsByName[""].Capacity, limsByName[""].Rate, admit.WithClock(clk),
			keyed.WithMaxKeys(maxKeys), keyed.WithPolicy(keyed.RefuseNew))
		if err != nil {
			t.Fatal(err)
		}
		keys := []string{"k0", "k1", "k2", "k3"}
		var mu sync.Mutex
		rec := map[string][]cAdm{} // key/name
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(g)+100))
				for range 3000 {
					if r.IntN(4) == 0 {
						clk.Advance(time.Duration(r.Int64N(50_000_000)))
						continue
					}
					key := keys[r.IntN(len(keys))]
					var call []admit.Limit
					viaN := r.IntN(3) == 0
					if viaN {
						call = []admit.Limit{limsByName[""]}
					} else {
						for _, nm := range names {
							if r.IntN(2) == 0 {
								call = append(call, limsByName[nm])
							}
						}
						if len(call) == 0 {
							call = []admit.Limit{limsByName["a"]}
						}
					}
					minCap := call[0].Capacity
					for _, c := range call {
						minCap = min(minCap, c.Capacity)
					}
					n := r.Int64N(minCap + 1)
					lo := clk.Now()
					var d admit.Decision
					var err error
					if viaN {
						d, err = l.AllowN(context.Background(), key, n)
					} else {
						d, err = l.AllowLimits(context.Background(), key, n, call...)
					}
					hi := clk.Now()
					if n == 0 && err == nil && !d.Allowed {
						t.Errorf("peek denied")
					}
					if err == nil && d.Allowed && n > 0 {
						mu.Lock()
						for _, c := range call {
							rec[key+"/"+c.Name] = append(rec[key+"/"+c.Name], cAdm{lo, hi, n})
						}
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if st := l.Stats(); st.Evictions != 0 {
			t.Fatalf("RefuseNew evicted: %+v", st)
		}
		for kn, adm := range rec {
			var nm string
			fmt.Sscanf(kn[3:], "%s", &nm)
			nm = kn[3:]
			if err := checkIntervals(limsByName[nm], adm); err != nil {
				t.Fatalf("seed %d %s: %v", seed, kn, err)
			}
		}
	}
}
