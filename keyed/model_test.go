package keyed_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/internal/refill"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/mutexbucket"
)

// rates the fuzzer picks from: fractional, whole, tiny, huge and zero.
var rates = []float64{0.5, 1.0 / 3, 1, 3, 7.3, 1000, 1e5, 1e9, 1e-6, 0}

// modelKeys is the key universe of FuzzModel: more keys than the bound, so
// that insertions, drops, evictions and refusals all happen.
var modelKeys = []string{"", "a", "b", "c", "d", "e"}

// keyModel is the model of one key: the shadow state the limiter must have
// (its empty point z and its time word: the insertion's or the latest
// peek's elapsed time), the latest reading of a call on it (for the window
// check), and a mutexbucket that decides the same while the key's readings
// never go back (inSync).
type keyModel struct {
	held   bool
	z, at  int64
	latest int64
	b      *mutexbucket.Bucket
	inSync bool
	spares []*mutexbucket.Bucket
	win    *buckettest.Bound
}

// FuzzModel drives a keyed.Limiter with a small key bound through random
// calls and clock steps (backward ones included) on a fake clock, beside a
// model of every key (keyModel) and of each shard's removal time. Before
// every call the model predicts, and after it checks:
//
//   - the whole Decision, exactly: Allowed, Remaining, RetryAfter and
//     ResetAfter from the shadow state, with waits found by binary search on
//     the stream (independently of the limiter's Reach); and Allowed equal
//     to the key's mutexbucket while it is in sync;
//   - insertions: a key not held is inserted when the limiter holds fewer
//     than WithMaxKeys keys, or after room was made;
//   - drops: every key that left the table was full at the call's time,
//     or was the one eviction of a call that found the limiter at its bound
//     with no full bucket anywhere (the first finding), under EvictLRU;
//   - refusals: only under RefuseNew, only at the bound (the second finding:
//     exactly at it) with no full bucket anywhere, with a RetryAfter that
//     is exactly the time until the first held bucket is full (the third);
//   - Stats counts every insertion, drop, eviction and refusal; Len and
//     Stats.Keys equal the keys held; never more than the bound;
//   - per key, no window of admissions holds more than
//     capacity + rate × window + 1 (buckettest.Bound, with each admission's
//     time known to lie between the key's latest reading and the latest
//     reading of all), between evictions of that key.
//
// ops is read three bytes at a time: op%4 == 0 advances the clock by the
// next two bytes shifted left by (op/4)%40 ns, op%4 == 1 moves it back by
// as much, otherwise AllowN(modelKeys[a%6], b%(capacity+3) − 1), which
// covers −1, 0, capacity and capacity+1.
func FuzzModel(f *testing.F) {
	f.Add(uint8(2), uint8(2), uint8(0), []byte{2, 1, 1, 2, 2, 1, 2, 3, 1, 0, 100, 1, 2, 4, 3, 2, 1, 1, 36, 1, 0, 2, 2, 2})
	f.Add(uint8(4), uint8(0), uint8(9), []byte{2, 0, 5, 2, 1, 5, 2, 2, 5, 2, 3, 5, 1, 1, 0, 2, 0, 1, 2, 4, 2, 0, 50, 30, 2, 5, 2})
	f.Add(uint8(0), uint8(9), uint8(4), []byte{2, 0, 2, 2, 1, 2, 2, 2, 2, 2, 3, 2, 120, 255, 255, 2, 4, 2, 2, 0, 1})
	f.Add(uint8(9), uint8(6), uint8(17), []byte{2, 1, 11, 2, 2, 11, 3, 3, 11, 40, 255, 0, 2, 4, 11, 2, 5, 11, 1, 9, 9, 2, 1, 0})
	f.Add(uint8(1), uint8(3), uint8(26), []byte{2, 0, 3, 2, 1, 3, 2, 2, 3, 2, 3, 3, 2, 4, 3, 2, 5, 3, 80, 0, 1, 2, 0, 1, 2, 1, 1})
	f.Add(uint8(3), uint8(7), uint8(3), []byte{2, 0, 4, 2, 1, 4, 4, 200, 0, 2, 0, 4, 2, 2, 4, 5, 3, 0, 2, 1, 4, 2, 3, 1})
	f.Add(uint8(2), uint8(2), uint8(12), []byte{2, 0, 3, 2, 1, 3, 2, 2, 3, 2, 3, 3, 2, 4, 3, 2, 5, 3, 4, 0, 40, 2, 0, 0, 2, 5, 1, 1, 0, 9, 2, 1, 4, 2, 3, 1})
	f.Add(uint8(5), uint8(3), uint8(2), []byte{2, 0, 6, 2, 1, 6, 2, 2, 6, 2, 3, 6, 2, 4, 6, 2, 5, 6, 2, 0, 1, 16, 9, 9, 2, 4, 1, 2, 5, 1, 2, 0, 1})
	f.Fuzz(func(t *testing.T, capSel, rateSel, cfgSel uint8, ops []byte) {
		if len(ops) > 900 {
			ops = ops[:900]
		}
		capacity := int64(capSel%10) + 1
		rate := rates[int(rateSel)%len(rates)]
		maxKeys := int(cfgSel%5) + 1    // 1..5 of 6 keys: the bound is reached
		shards := 1 << (cfgSel / 5 % 2) // 1 or 2
		refuse := cfgSel/10%2 == 1
		for shards > maxKeys {
			shards >>= 1
		}
		policy := keyed.EvictLRU
		if refuse {
			policy = keyed.RefuseNew
		}
		const t0 = -12345
		clk := buckettest.NewFakeClock(t0)
		l, err := keyed.New(capacity, rate, admit.WithClock(clk), keyed.WithMaxKeys(maxKeys),
			keyed.WithShards(shards), keyed.WithPolicy(policy))
		require.NoError(t, err)
		p, err := refill.NewParams(capacity, rate)
		require.NoError(t, err)

		// The mutexbuckets read modelClk, which the test sets to the time
		// the limiter applies before each call; spares replace those of keys
		// that left the table, all created now, with the limiter's origin.
		modelClk := buckettest.NewFakeClock(t0)
		newBucket := func() *mutexbucket.Bucket {
			b, err := mutexbucket.New(capacity, rate, admit.WithClock(modelClk))
			require.NoError(t, err)
			return b
		}
		model := map[string]*keyModel{}
		for _, k := range modelKeys {
			km := &keyModel{b: newBucket(), inSync: true, win: buckettest.NewBound(capacity, rate)}
			for range len(ops)/3 + 1 {
				km.spares = append(km.spares, newBucket())
			}
			model[k] = km
		}
		removedAt := make([]int64, shards)
		elapsed := func() int64 {
			d := clk.Now() - t0
			return min(max(d, 0), refill.Horizon)
		}
		// streamWait is the smallest d with V(at + d) >= target, or the
		// largest Duration when none within the horizon.
		streamWait := func(at, target int64) time.Duration {
			if p.V(at) >= target {
				return 0
			}
			if p.V(refill.Horizon) < target {
				return time.Duration(math.MaxInt64)
			}
			lo, hi := at, refill.Horizon // V(lo) < target <= V(hi)
			for hi-lo > 1 {
				mid := lo + (hi-lo)/2
				if p.V(mid) >= target {
					hi = mid
				} else {
					lo = mid
				}
			}
			return time.Duration(hi - at)
		}
		isFull := func(km *keyModel, t int64) bool { return km.z <= p.V(t)-p.Cap }
		stats := l.Stats()
		latest := int64(0)
		for i := 0; i+2 < len(ops); i += 3 {
			op, a, b := ops[i], ops[i+1], ops[i+2]
			switch op % 4 {
			case 0, 1:
				d := (int64(a)<<8 | int64(b)) << (op / 4 % 40)
				if op%4 == 1 {
					d = -d
				}
				clk.Advance(time.Duration(d))
				continue
			}
			key := modelKeys[int(a)%len(modelKeys)]
			n := int64(b)%(capacity+3) - 1
			km := model[key]
			r := elapsed()
			latest = max(latest, r)
			dec, err := l.AllowN(context.Background(), key, n)
			if n < 0 || n > capacity {
				require.ErrorIs(t, err, admit.ErrUnsatisfiable, "op %d: AllowN(%d)", i/3, n)
				require.False(t, dec.Allowed)
				require.Equal(t, stats, l.Stats(), "op %d: a bad n touches nothing", i/3)
				continue
			}
			si := l.ShardOf(key)
			need := p.Units(n)
			heldBefore := 0
			for _, k := range modelKeys {
				if model[k].held {
					heldBefore++
				}
			}
			now := l.Stats()
			// The call's time, as the limiter applies it.
			tc := max(r, km.at)
			if !km.held {
				tc = max(r, removedAt[si])
			}
			anyFull := false
			for _, k := range modelKeys {
				if model[k].held && isFull(model[k], tc) {
					anyFull = true
				}
			}
			// Every key that left the table was full at the call's time (a
			// drop), or is the call's one eviction, or was dropped by the
			// new key's insertion, whose hand looks at its shard's slots at
			// the new bucket's time: at least the evicted key's time when
			// the eviction was in that shard (a new bucket starts no
			// earlier than the keys removed from its shard).
			var removed, live []string
			for _, k := range modelKeys {
				if mk := model[k]; mk.held && !l.Held(k) {
					removed = append(removed, k)
					if !isFull(mk, tc) {
						live = append(live, k)
					}
				}
			}
			evicted := -1 // index in live ("" is a key)
			for ei, e := range live {
				t2 := tc
				if l.ShardOf(e) == si {
					t2 = max(tc, model[e].at)
				}
				lookDrops := true
				for _, k := range live {
					if k != e && (km.held || l.ShardOf(k) != si || !isFull(model[k], t2)) {
						lookDrops = false
					}
				}
				if lookDrops {
					evicted = ei
					break
				}
			}
			require.True(t, len(live) == 0 || evicted >= 0, "op %d: %d keys left the table with buckets not full (%q): one eviction per call, and what the insertion drops is full", i/3, len(live), live)
			var drops, evictions uint64
			for _, k := range removed {
				mk := model[k]
				mk.held = false
				removedAt[l.ShardOf(k)] = max(removedAt[l.ShardOf(k)], mk.at, tc)
				mk.b, mk.spares = mk.spares[0], mk.spares[1:]
				mk.inSync = true
				if evicted < 0 || k != live[evicted] {
					drops++
					continue
				}
				require.NotEqual(t, key, k, "op %d: the called key left the table with a bucket not full", i/3)
				require.False(t, refuse, "op %d: RefuseNew evicted %q", i/3, k)
				require.Equal(t, maxKeys, heldBefore, "op %d: evicted below the bound", i/3)
				require.False(t, anyFull, "op %d: %q evicted while a full bucket was held", i/3, k)
				evictions++
				mk.win = buckettest.NewBound(capacity, rate) // an evicted client restarts full
			}
			if !km.held {
				// A new bucket starts no earlier than the latest time of a key
				// removed from its shard, this call's removals included.
				tc = max(r, removedAt[si])
			}
			if errors.Is(err, admit.ErrUnavailable) {
				require.True(t, refuse, "op %d: a refusal under EvictLRU", i/3)
				require.False(t, km.held, "op %d: a held key refused", i/3)
				require.Positive(t, n, "op %d: a peek refused", i/3)
				require.Equal(t, maxKeys, heldBefore, "op %d: refused below the bound", i/3)
				require.False(t, anyFull, "op %d: refused while a full bucket was held", i/3)
				require.False(t, dec.Allowed)
				first := time.Duration(math.MaxInt64)
				for _, k := range modelKeys {
					if model[k].held {
						first = min(first, streamWait(tc, model[k].z+p.Cap))
					}
				}
				require.Positive(t, dec.RetryAfter, "op %d", i/3)
				require.Equal(t, first, dec.RetryAfter, "op %d: RetryAfter is the time until the first held bucket is full", i/3)
				require.Equal(t, stats.Refusals+1, now.Refusals, "op %d: refusal counted", i/3)
			} else {
				require.NoError(t, err, "op %d", i/3)
				v := p.V(tc)
				z := max(km.z, v-p.Cap)
				if !km.held {
					z = v - p.Cap
				}
				want := v-z >= need
				left := max(v-z, 0)
				if want && n > 0 {
					z += need
					left -= need
				}
				exp := admit.Decision{Allowed: want, Limit: capacity, Remaining: left >> p.Shift}
				if z > v-p.Cap {
					exp.ResetAfter = streamWait(tc, z+p.Cap)
				}
				if !want {
					exp.RetryAfter = streamWait(tc, km.z+need)
				}
				require.Equal(t, exp, dec, "op %d: AllowN(%q, %d) at %d (reading %d)", i/3, key, n, tc, r)
				if km.inSync && r >= km.latest {
					modelClk.Set(t0 + tc)
					require.Equal(t, want, km.b.TryAcquireN(n), "op %d: mutexbucket disagrees", i/3)
				} else if want && n > 0 {
					km.inSync = false
				}
				if want && n > 0 {
					require.True(t, km.win.AdmitWithin(max(km.latest, r), latest, n), "op %d: key %q admitted more than capacity + rate × window", i/3, key)
				}
				switch {
				case km.held && n > 0:
					km.z = max(km.z, z)
				case km.held:
					// A peek changes nothing in z (at a full bucket it
					// would raise z to V(tc) − Cap); it records its time
					// instead. Decisions cannot tell the two apart (a
					// later call applies at least km.at), but whether the
					// bucket is full at an older call's time, when another
					// key's call looks for room, can: the model keeps the
					// limiter's representation.
					km.at = max(km.at, tc)
				case n > 0:
					km.held, km.z, km.at = true, z, tc
				}
			}
			km.latest = max(km.latest, r)
			require.LessOrEqual(t, evictions, uint64(1), "op %d: one eviction per call", i/3)
			for _, k := range modelKeys {
				require.Equal(t, model[k].held, l.Held(k), "op %d: key %q", i/3, k)
			}
			if !errors.Is(err, admit.ErrUnavailable) && n > 0 && !l.Held(key) {
				t.Fatalf("op %d: key %q admitted but not held", i/3, key)
			}
			held := 0
			for _, k := range modelKeys {
				if model[k].held {
					held++
				}
			}
			require.Equal(t, stats.Drops+drops, now.Drops, "op %d: drops counted", i/3)
			require.Equal(t, stats.Evictions+evictions, now.Evictions, "op %d: evictions counted", i/3)
			require.Equal(t, now.Inserts-stats.Inserts, uint64(held-heldBefore)+drops+evictions, "op %d: insertions counted", i/3)
			require.Equal(t, held, now.Keys, "op %d: Stats.Keys", i/3)
			require.Equal(t, held, l.Len(), "op %d: Len", i/3)
			require.LessOrEqual(t, held, maxKeys, "op %d: the bound", i/3)
			stats = now
		}
	})
}
