package shardedbucket

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// TestHookedWalk: one goroutine's takes of 1..4 at fresh or stale
// readings (stale: up to 3 µs behind the clock, never behind the clock
// itself for the steps, which read it themselves), with a competing take
// from another home injected, at the clock's latest reading, in the middle
// of gathers (so that they lose their races and put back), of central
// admissions (so that they lose the central word and stand aside) and of
// collapses and spreads (half-done steps), the clock sometimes moving on
// in between. Every admission, injected ones
// included, is checked against capacity + rate × T + 1 on every window,
// and an hour later a burst takes exactly the capacity. Seeded: a failure
// names its seed.
func TestHookedWalk(t *testing.T) {
	for i, shards := range []int{2, 4, 8, 2, 4, 8} {
		seed := uint64(i)
		rand := rand.New(rand.NewPCG(seed, 11))
		clk := buckettest.NewFakeClock(1e9)
		const capacity, rate = 12, 1e6
		b, err := New(capacity, rate, WithShards(shards), admit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		var adm []buckettest.Admission
		inHook := false
		inject := func(b *Bucket) {
			if inHook || rand.IntN(2) == 0 {
				return
			}
			inHook = true
			if rand.IntN(2) == 0 {
				clk.Advance(time.Duration(rand.IntN(1500))) // the caller's reading goes stale
			}
			now := b.clk.Now()
			n := 1 + rand.Int64N(3)
			if b.takeAt(b.p.Units(n), b.p.V(now), uint(rand.IntN(shards))) {
				adm = append(adm, buckettest.Admission{At: now, N: n})
			}
			inHook = false
		}
		testHookGather = func(b *Bucket, _ int64, _ uint, _ []int64) { inject(b) }
		testHookCentral = func(b *Bucket, _ int64, _ uint) { inject(b) }
		testHookStep = func(b *Bucket, _ int) {
			// Under resvMu: a take may gather and, losing, lock it; only
			// a take that cannot reach put-back is safe here, one on the
			// home shard alone.
			if inHook || rand.IntN(3) != 0 {
				return
			}
			inHook = true
			if rand.IntN(2) == 0 {
				clk.Advance(time.Duration(rand.IntN(1500))) // time passes during the step
			}
			now := b.clk.Now()
			h := &b.shards[rand.IntN(shards)]
			if z := h.z.Load(); z != frozen {
				vi := b.g.vi(h, b.p.V(now))
				base := max(z, vi-h.cap)
				if vi-base >= b.p.Units(1) && h.z.CompareAndSwap(z, base+b.p.Units(1)) {
					adm = append(adm, buckettest.Admission{At: now, N: 1})
				}
			}
			inHook = false
		}
		for range 4000 {
			if rand.IntN(4) == 0 {
				clk.Advance(time.Duration(rand.IntN(2500)))
			}
			now := b.clk.Now()
			at := now
			if rand.IntN(3) == 0 {
				at = max(0, now-rand.Int64N(3000))
			}
			n := 1 + rand.Int64N(4)
			if b.takeAt(b.p.Units(n), b.p.V(at), uint(rand.IntN(shards))) {
				adm = append(adm, buckettest.Admission{At: at, N: n})
			}
		}
		testHookGather, testHookCentral, testHookStep = nil, nil, nil
		if err := buckettest.CheckAdmissions(capacity, rate, adm); err != nil {
			t.Fatalf("seed %d, %d shards: %.600v", seed, shards, err)
		}
		clk.Advance(time.Hour)
		got := int64(0)
		for b.TryAcquire() {
			got++
		}
		if got != capacity {
			t.Fatalf("seed %d, %d shards: after an hour a burst took %d, want %d", seed, shards, got, capacity)
		}
	}
}
