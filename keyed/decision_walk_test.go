package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
)

// KEYED_WALK_TRACE=1 prints a failed decisionWalk call by call.
var rwTrace = os.Getenv("KEYED_WALK_TRACE") != ""

type rwRegime struct {
	cap  int64
	rate float64
	b    *buckettest.Bound
	adm  []buckettest.Admission
}

// decisionWalk: a property walk on a fake clock over 18 keys (empty, 64, 65
// and 1000 bytes among them) past WithMaxKeys(6), with AllowN and
// AllowLimits calls whose limit sets change (carry-overs to other
// capacities and rates, the primary limit's Name included), peeks, n < 0
// and n above a capacity, clock steps forward, by a nanosecond, and (in
// backward mode, where the limiter's own limits are two, so no key
// converts) back. It checks every window of every (key, Name) while its
// limit is unchanged (on the key's own time axis, the latest reading
// applied to it), that a denial changes no state (a peek before and after
// agree), that RetryAfter is exact (denied 1 ns before, admitted at it),
// that Remaining agrees with the next call (Remaining+1 denied, Remaining
// admitted), that ResetAfter is exact (a limit not full 1 ns before,
// every one full at it), and Len <= WithMaxKeys. Evicted keys (and in
// backward mode every key dropped: TestBackwardClockDrop) restart their
// windows.
func decisionWalk(t *testing.T, seed uint64, backward, refuse bool, shards int, steps int) {
	r := rand.New(rand.NewPCG(seed, 7))
	var trace strings.Builder
	defer func() {
		if t.Failed() {
			if rwTrace {
				fmt.Print(trace.String())
			}
			t.Logf("config: seed %d backward %v refuse %v shards %d", seed, backward, refuse, shards)
		}
	}()
	variants := map[string][]admit.Limit{
		"":  {{Name: "", Capacity: 5, Rate: 2}, {Name: "", Capacity: 7, Rate: 2}, {Name: "", Capacity: 2, Rate: 9}},
		"a": {{Name: "a", Capacity: 3, Rate: 1}, {Name: "a", Capacity: 8, Rate: 0.5}, {Name: "a", Capacity: 3, Rate: 4}},
		"b": {{Name: "b", Capacity: 10, Rate: 1.0 / 3}, {Name: "b", Capacity: 2, Rate: 1e-6}},
		"c": {{Name: "c", Capacity: 1, Rate: 0}, {Name: "c", Capacity: 4, Rate: 3.7}},
	}
	names := []string{"", "a", "b", "c"}
	clk := buckettest.NewFakeClock(1_000_000_000)
	const maxKeys = 6
	opts := []admit.Option{admit.WithClock(clk), keyed.WithMaxKeys(maxKeys), keyed.WithShards(shards)}
	if refuse {
		opts = append(opts, keyed.WithPolicy(keyed.RefuseNew))
	}
	var own []admit.Limit
	if backward {
		own = []admit.Limit{variants[""][0], variants["a"][0]} // never single: no conversions
	} else {
		own = []admit.Limit{variants[""][0]}
	}
	l, err := keyed.NewLimits(own, opts...)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"", strings.Repeat("x", 64), strings.Repeat("y", 65), strings.Repeat("z", 1000)}
	for i := range 14 {
		keys = append(keys, fmt.Sprint("k", i))
	}
	keyT := map[string]int64{}
	gmax := clk.Now()             // the limiter's origin: an earlier reading applies it
	reg := map[string]*rwRegime{} // key + "\x00" + name
	regFor := func(key string, lim admit.Limit) *rwRegime {
		id := key + "\x00" + lim.Name
		g := reg[id]
		if g == nil || g.cap != lim.Capacity || g.rate != lim.Rate {
			g = &rwRegime{cap: lim.Capacity, rate: lim.Rate, b: buckettest.NewBound(lim.Capacity, lim.Rate)}
			reg[id] = g
		}
		return g
	}
	resetKey := func(key string) {
		for _, nm := range names {
			delete(reg, key+"\x00"+nm)
		}
	}
	ctx := context.Background()
	var lastEv uint64
	// call runs one call and checks it; it returns the decision and error.
	call := func(step int, key string, n int64, lims []admit.Limit, viaN bool) (admit.Decision, error, bool) {
		now := clk.Now()
		prevT := keyT[key]
		keyT[key] = max(keyT[key], now)
		gmax = max(gmax, now)
		fresh := gmax == now // a reading no key of the limiter has passed (absentAt, Fresh)
		for _, lm := range lims {
			regFor(key, lm)
		}
		var d admit.Decision
		var err error
		if viaN {
			d, err = l.AllowN(ctx, key, n)
		} else {
			d, err = l.AllowLimits(ctx, key, n, lims...)
		}
		if rwTrace {
			fmt.Fprintf(&trace, "step %d t=%d key=%.8q n=%d viaN=%v lims=%v -> %+v %v\n", step, now, key, n, viaN, lims, d, err)
		}
		minCap := int64(1 << 62)
		for _, lm := range lims {
			minCap = min(minCap, lm.Capacity)
		}
		if backward {
			// On a clock that runs backwards a drop at a later time than the
			// key's own (the shard's absentAt) may give one more burst: see
			// TestBackwardClockDrop. Reset the windows of every key dropped.
			for _, k := range keys {
				if !l.Held(k) {
					resetKey(k)
				}
			}
		} else if st := l.Stats(); st.Evictions != lastEv {
			lastEv = st.Evictions
			for _, k := range keys {
				if !l.Held(k) {
					resetKey(k)
				}
			}
		}
		if l.Len() > maxKeys {
			t.Fatalf("seed %d step %d: Len %d > %d", seed, step, l.Len(), maxKeys)
		}
		if err != nil {
			keyT[key] = prevT // an error applies no time to the key
		}
		if n < 0 || n > minCap {
			if !errors.Is(err, admit.ErrUnsatisfiable) || d.Allowed {
				t.Fatalf("seed %d step %d: n=%d minCap %d: %v %+v", seed, step, n, minCap, err, d)
			}
			return d, err, fresh
		}
		if err != nil {
			if !errors.Is(err, admit.ErrUnavailable) || d.Allowed || d.RetryAfter <= 0 {
				t.Fatalf("seed %d step %d: err %v %+v", seed, step, err, d)
			}
			return d, err, fresh
		}
		if n == 0 && !d.Allowed {
			t.Fatalf("seed %d step %d: peek denied %+v", seed, step, d)
		}
		if d.Allowed && d.RetryAfter != 0 {
			t.Fatalf("seed %d step %d: allowed with RetryAfter %+v", seed, step, d)
		}
		if d.Allowed && n > 0 {
			for _, lm := range lims {
				g := regFor(key, lm)
				g.adm = append(g.adm, buckettest.Admission{At: keyT[key], N: n})
				if !g.b.Admit(keyT[key], n) {
					t.Fatalf("seed %d step %d: key %.10q limit %+v over bound: %v", seed, step, key, lm, g.adm)
				}
			}
		}
		return d, err, fresh
	}
	pick := func() ([]admit.Limit, bool) {
		if r.IntN(4) == 0 {
			return own, true
		}
		var lims []admit.Limit
		perm := r.Perm(len(names))
		k := 1 + r.IntN(3)
		for _, i := range perm[:k] {
			vs := variants[names[i]]
			lims = append(lims, vs[r.IntN(len(vs))])
		}
		return lims, false
	}
	for step := range steps {
		switch x := r.IntN(10); {
		case x == 0:
			clk.Advance(time.Duration(r.Int64N(3_000_000_000)))
		case x == 1:
			clk.Advance(time.Duration(r.Int64N(4)))
		case x == 2 && backward:
			clk.Set(clk.Now() - r.Int64N(2_000_000_000))
		case x == 3 && r.IntN(10) == 0:
			clk.Advance(time.Duration(r.Int64N(1000)) * time.Second)
		}
		key := keys[r.IntN(len(keys))]
		lims, viaN := pick()
		mc := minCapacity(lims)
		n := walkCost(r, mc, 10)
		var d0 admit.Decision
		peeked := false
		if n > 0 && n <= mc && r.IntN(2) == 0 {
			var err error
			d0, err, _ = call(step, key, 0, lims, viaN)
			peeked = err == nil
		}
		d, err, fresh := call(step, key, n, lims, viaN)
		if err != nil || n <= 0 || n > mc {
			continue
		}
		if !d.Allowed {
			if peeked {
				d1, err1, _ := call(step, key, 0, lims, viaN)
				if err1 == nil && (d1 != d0) {
					t.Fatalf("seed %d step %d: denial changed state: peek before %+v after %+v (denial %+v)", seed, step, d0, d1, d)
				}
			}
			if fresh && d.RetryAfter < time.Hour && r.IntN(2) == 0 {
				clk.Advance(d.RetryAfter - 1)
				d2, err2, f2 := call(step, key, n, lims, viaN)
				if err2 == nil && f2 && d2.Allowed && d.RetryAfter > 0 {
					t.Fatalf("seed %d step %d: admitted 1ns before RetryAfter %v: %+v then %+v", seed, step, d.RetryAfter, d, d2)
				}
				if err2 == nil && !d2.Allowed {
					clk.Advance(1)
					d3, err3, f3 := call(step, key, n, lims, viaN)
					if err3 == nil && f3 && !d3.Allowed {
						t.Fatalf("seed %d step %d: denied at RetryAfter %v: %+v then %+v", seed, step, d.RetryAfter, d, d3)
					}
				}
			}
			continue
		}
		// Allowed: Remaining agrees with the next call at the same time.
		if r.IntN(3) == 0 && d.Remaining+1 <= mc {
			d4, err4, _ := call(step, key, d.Remaining+1, lims, viaN)
			if err4 == nil && d4.Allowed {
				t.Fatalf("seed %d step %d: Remaining %d but %d admitted: %+v then %+v", seed, step, d.Remaining, d.Remaining+1, d, d4)
			}
			if err4 == nil && d.Remaining > 0 {
				d5, err5, _ := call(step, key, d.Remaining, lims, viaN)
				if err5 == nil && !d5.Allowed {
					t.Fatalf("seed %d step %d: Remaining %d but denied: %+v then %+v", seed, step, d.Remaining, d, d5)
				}
			}
		} else if fresh && r.IntN(3) == 0 && d.ResetAfter > 0 && d.ResetAfter < time.Hour {
			clk.Advance(d.ResetAfter - 1)
			notFull := false
			for _, lm := range lims {
				dp, errp, _ := call(step, key, 0, []admit.Limit{lm}, false)
				if errp == nil && dp.Remaining < lm.Capacity {
					notFull = true
				}
			}
			if !notFull {
				t.Fatalf("seed %d step %d: every limit full 1ns before ResetAfter %v: %+v", seed, step, d.ResetAfter, d)
			}
			clk.Advance(1)
			for _, lm := range lims {
				dp, errp, _ := call(step, key, 0, []admit.Limit{lm}, false)
				if errp == nil && dp.Remaining != lm.Capacity {
					t.Fatalf("seed %d step %d: limit %+v not full at ResetAfter %v: %+v then %+v", seed, step, lm, d.ResetAfter, d, dp)
				}
			}
		}
	}
}

func TestDecisionWalk(t *testing.T) {
	for seed := range uint64(walkCount(4)) { // 2,000 walks passed when it was written
		for _, backward := range []bool{false, true} {
			for _, refuse := range []bool{false, true} {
				for _, shards := range []int{1, 4} {
					decisionWalk(t, seed, backward, refuse, shards, 1500)
				}
			}
		}
	}
}

// minCapacity is the smallest capacity of lims, 2^62 for none (so that a
// cost above it still fits an int64).
func minCapacity(lims []admit.Limit) int64 {
	m := int64(1 << 62)
	for _, lm := range lims {
		m = min(m, lm.Capacity)
	}
	return m
}

// walkCost draws a walk's cost for limits whose smallest capacity is mc:
// one time in outOf each a peek (0), a bad cost (-1) and one above mc,
// else 1 to mc.
func walkCost(r *rand.Rand, mc int64, outOf int) int64 {
	switch r.IntN(outOf) {
	case 0:
		return 0
	case 1:
		return -1
	case 2:
		return mc + 1
	}
	return 1 + r.Int64N(mc)
}
