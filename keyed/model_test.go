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

// modelKeys is the key universe of FuzzModel: few enough that keys collide
// on shards and the bound is reached.
var modelKeys = []string{"", "a", "b", "c", "d", "e"}

// shadow is a key's bucket in mutexbucket's own representation, (tokens,
// last), advanced with refill.Params.Refill exactly as mutexbucket does;
// it gives the exact numbers a Decision must carry.
type shadow struct{ tokens, last int64 }

// FuzzModel drives a keyed.Limiter with a small key bound through random
// calls and clock steps (backward ones included) on a fake clock, beside a
// model: for every key a mutexbucket created with the limiter (so sharing
// its stream's origin) and a shadow of it, read at the shard's time (the
// latest reading the key's shard has applied). After every call it checks:
//
//   - Allowed equals the mutexbucket's decision, and Remaining, RetryAfter
//     and ResetAfter equal the exact values the shadow gives (waits found by
//     binary search on Refill, independently of the limiter's arithmetic);
//   - a key the limiter did not hold was full in the model (dropping is
//     exact), unless it was evicted, and every key that left the table was
//     either full (a drop) or counted as an eviction; Stats counts every
//     insertion, drop, eviction and refusal;
//   - never more keys than the bound, per shard and in all;
//   - per key, no window of shard time holds more than
//     capacity + rate × window + 1 admitted tokens: always under RefuseNew,
//     and between evictions of that key under EvictLRU (an evicted client
//     legitimately restarts full).
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

		// The mutexbuckets read modelClk, which the test sets to the
		// shard's time before each call; spares replace evicted ones, all
		// created now, with the limiter's origin.
		modelClk := buckettest.NewFakeClock(t0)
		newBucket := func() *mutexbucket.Bucket {
			b, err := mutexbucket.New(capacity, rate, admit.WithClock(modelClk))
			require.NoError(t, err)
			return b
		}
		type keyModel struct {
			b      *mutexbucket.Bucket
			spares []*mutexbucket.Bucket
			sh     shadow
			win    *buckettest.Bound
		}
		model := map[string]*keyModel{}
		for _, k := range modelKeys {
			km := &keyModel{b: newBucket(), sh: shadow{tokens: p.Cap}, win: buckettest.NewBound(capacity, rate)}
			for range len(ops)/3 + 1 {
				km.spares = append(km.spares, newBucket())
			}
			model[k] = km
		}
		shardT := make([]int64, shards) // elapsed time each shard has applied
		elapsed := func() int64 {
			d := clk.Now() - t0
			return min(max(d, 0), refill.Horizon)
		}
		full := func(sh shadow, at int64) bool {
			bal, _ := p.Refill(sh.tokens, sh.last, at)
			return bal == p.Cap
		}
		// waitFor is the smallest d with Refill(bal as of at, at + d) >= need,
		// or the largest Duration when none within the horizon.
		waitFor := func(bal, at, need int64) time.Duration {
			if bal >= need {
				return 0
			}
			if got, _ := p.Refill(bal, at, refill.Horizon); got < need {
				return time.Duration(math.MaxInt64)
			}
			lo, hi := at, refill.Horizon // Refill(lo) < need <= Refill(hi)
			for hi-lo > 1 {
				mid := lo + (hi-lo)/2
				if got, _ := p.Refill(bal, at, mid); got >= need {
					hi = mid
				} else {
					lo = mid
				}
			}
			return time.Duration(hi - at)
		}
		held := func() map[string]bool {
			m := map[string]bool{}
			for _, k := range modelKeys {
				if l.Held(k) {
					m[k] = true
				}
			}
			return m
		}
		before := held()
		stats := l.Stats()
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
			dec, err := l.AllowN(context.Background(), key, n)
			if n < 0 || n > capacity {
				require.ErrorIs(t, err, admit.ErrUnsatisfiable, "op %d: AllowN(%d)", i/3, n)
				require.False(t, dec.Allowed)
				require.Equal(t, stats, l.Stats(), "op %d: a bad n touches nothing", i/3)
				continue
			}
			si := l.ShardOf(key)
			shardT[si] = max(shardT[si], elapsed())
			at := shardT[si]
			modelClk.Set(t0 + at)
			after := held()
			now := l.Stats()
			if errors.Is(err, admit.ErrUnavailable) {
				require.True(t, refuse, "op %d: a refusal under EvictLRU", i/3)
				require.False(t, before[key], "op %d: a held key refused", i/3)
				require.False(t, dec.Allowed)
				require.Positive(t, dec.RetryAfter)
				require.Equal(t, stats.Refusals+1, now.Refusals, "op %d: refusal counted", i/3)
			} else {
				require.NoError(t, err, "op %d", i/3)
				require.True(t, before[key] || full(km.sh, at), "op %d: key %q was forgotten while its bucket was not full", i/3, key)
				// The model decides.
				want := km.b.TryAcquireN(n)
				bal, _ := p.Refill(km.sh.tokens, km.sh.last, at)
				need := p.Units(n)
				require.Equal(t, want, bal >= need, "op %d: the shadow disagrees with mutexbucket", i/3)
				left := bal
				if want && n > 0 {
					left = bal - need
					km.sh = shadow{tokens: left, last: at}
				}
				exp := admit.Decision{Allowed: want, Limit: capacity, Remaining: left >> p.Shift}
				if left < p.Cap {
					exp.ResetAfter = waitFor(left, at, p.Cap)
				}
				if !want {
					exp.RetryAfter = waitFor(bal, at, need)
				}
				require.Equal(t, exp, dec, "op %d: AllowN(%q, %d) at shard time %d", i/3, key, n, at)
				require.InDelta(t, p.Float(left), km.b.Tokens(), 1e-9*float64(capacity), "op %d: mutexbucket's balance", i/3)
				if want && n > 0 {
					require.True(t, km.win.Admit(at, n), "op %d: key %q admitted more than capacity + rate × window", i/3, key)
				}
				if !before[key] && after[key] {
					require.Equal(t, stats.Inserts+1, now.Inserts, "op %d: insertion counted", i/3)
				}
			}
			// Every key that left the table was full at its shard's time (a
			// drop) or evicted.
			var drops, evictions uint64
			for _, k := range modelKeys {
				if !before[k] || after[k] {
					continue
				}
				mk := model[k]
				if full(mk.sh, shardT[l.ShardOf(k)]) {
					drops++
					continue
				}
				require.NotEqual(t, key, k, "op %d: the called key left the table with a bucket not full", i/3)
				evictions++
				mk.b, mk.spares = mk.spares[0], mk.spares[1:]
				mk.sh = shadow{tokens: p.Cap}
				mk.win = buckettest.NewBound(capacity, rate) // an evicted client restarts full
			}
			require.Equal(t, stats.Drops+drops, now.Drops, "op %d: drops counted", i/3)
			require.Equal(t, stats.Evictions+evictions, now.Evictions, "op %d: evictions counted", i/3)
			if refuse {
				require.Zero(t, now.Evictions, "op %d: RefuseNew never evicts", i/3)
			}
			require.Equal(t, len(after), now.Keys, "op %d: Stats.Keys", i/3)
			require.Equal(t, len(after), l.Len(), "op %d: Len", i/3)
			require.LessOrEqual(t, now.Keys, maxKeys, "op %d: the bound", i/3)
			hs, share := l.ShardLens()
			for j := range hs {
				require.LessOrEqual(t, hs[j], share[j], "op %d: shard %d's share", i/3, j)
			}
			before, stats = after, now
		}
	})
}
