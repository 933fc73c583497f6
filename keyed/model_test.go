package keyed_test

import (
	"context"
	"errors"
	"math"
	"math/big"
	"strconv"
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

// limModel is one (key, Name)'s bucket in a multi-limit key: the limit it
// is held under and its empty point.
type limModel struct {
	lim admit.Limit
	p   refill.Params
	z   int64
}

// keyModel is the model of one key: the shadow state the limiter must have
// (for a single-limit key its empty point z and its time word: the
// insertion's or the latest peek's elapsed time; for a multi-limit key the
// latest time applied and a state per Name), the latest reading of a call
// on it (for the window check), a mutexbucket that decides the same while
// the key holds one limit and its readings never go back (inSync), and a
// window check per Name.
type keyModel struct {
	held, multi bool
	z, at       int64
	last        int64
	lims        []limModel
	latest      int64
	b           *mutexbucket.Bucket
	inSync      bool
	spares      []*mutexbucket.Bucket
	evictions   int64
	wins        map[string]*window
}

// window checks, admission by admission, that no window of one (key, Name)
// in which the Name's Capacity and Rate did not change holds more than
// capacity + rate × its length + 1, plus one capacity per eviction of the
// key within the window: an evicted client restarts full, so a window
// that spans an eviction may hold one burst more, and no more (the new
// bucket starts no earlier than the latest time the key had seen). An
// admission's time is known to lie in [lo, hi] (buckettest.Bound's
// AdmitWithin): with P the tokens admitted and E_j the evictions of the key
// before admission j,
// P(j) − P(before i) − rate·(hi_j − lo_i) − Cap·(E_j − E_i) <= Cap + 1.
type window struct {
	lim   admit.Limit
	rate  *big.Rat // tokens per ns
	total int64
	best  *big.Rat // min over admissions i of P(before i) − rate·lo_i − Cap·E_i
}

func newWindow(lim admit.Limit) *window {
	r, _ := new(big.Rat).SetString(strconv.FormatFloat(lim.Rate, 'g', -1, 64))
	return &window{lim: lim, rate: r.Quo(r, big.NewRat(1e9, 1))}
}

// admit records an admission of n within [lo, hi], the key evicted
// evictions times before it, and reports whether every window ending with
// it keeps the bound.
func (w *window) admit(lo, hi, n, evictions int64) bool {
	at := func(t int64) *big.Rat {
		v := new(big.Rat).SetInt64(w.total - w.lim.Capacity*evictions)
		return v.Sub(v, new(big.Rat).Mul(w.rate, new(big.Rat).SetInt64(t)))
	}
	if start := at(lo); w.best == nil || start.Cmp(w.best) < 0 {
		w.best = start
	}
	w.total += n
	excess := at(hi)
	return excess.Sub(excess, w.best).Cmp(big.NewRat(w.lim.Capacity+1, 1)) <= 0
}

// until is the wait from t to the elapsed time at: the largest Duration
// past the horizon.
func until(t, at int64) time.Duration {
	if at > refill.Horizon {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(max(at-t, 0))
}

// FuzzModel drives a keyed.Limiter with a small key bound through random
// calls and clock steps (backward ones included: stale readings) on a fake
// clock, beside a model of every key (keyModel) and of each shard's removal
// time. The calls interleave every operation that changes a key's state:
// takes and peeks on the one-limit path (AllowN), AllowLimits calls that
// convert a key to a multi-limit entry, carry the limiter's limit over to
// another Capacity and Rate and back, or add a second Name; and, through
// new keys at the bound, sweeps, drops, evictions and refusals. Before
// every call the model predicts, and after it checks:
//
//   - the whole Decision, exactly: Allowed, Remaining, RetryAfter and
//     ResetAfter from the shadow state, with waits found by binary search on
//     the stream (independently of the limiter's Reach); and Allowed equal
//     to the key's mutexbucket while it is in sync;
//   - explicitly, what no Decision may break: a peek is allowed; a denial
//     waits more than 0 and at most the time the slowest named limit takes
//     to produce n tokens, a reset at most the time it takes to fill (waits
//     are counted from the latest time the key has seen, never inflated by
//     a stale reading); a refusal waits more than 0;
//   - insertions: a key not held is inserted when the limiter holds fewer
//     than WithMaxKeys keys, or after room was made;
//   - drops: every key that left the table was full at the call's time
//     (every limit it holds), or was the one eviction of a call that found
//     the limiter at its bound with no full bucket anywhere, under EvictLRU;
//   - refusals: only under RefuseNew, only exactly at the bound, with no
//     full bucket anywhere, with a RetryAfter that is exactly the time until
//     the first held bucket is full;
//   - Stats counts every insertion, drop, eviction and refusal; Len and
//     Stats.Keys equal the keys held; never more than the bound;
//   - per (key, Name), no window in which the Name's Capacity and Rate did
//     not change holds more than capacity + rate × window + 1, plus one
//     capacity per eviction of the key (window), with each admission's time
//     known to lie between the key's latest reading and the latest reading
//     of all.
//
// ops is read three bytes at a time: op%4 == 0 advances the clock by the
// next two bytes shifted left by (op/4)%40 ns, op%4 == 1 moves it back by
// as much, op%4 == 2 calls AllowN(modelKeys[a%6], b%(capacity+3) − 1),
// which covers −1, 0, capacity and capacity+1; op%4 == 3 does the same
// when mix is 0, and otherwise calls AllowLimits with the set (op/4)%5 of
// {P}, {P'}, {P, O}, {O}, {P', O}: P the limiter's limit, P' the same Name
// at another Capacity and Rate (from mix), O a second Name; n ranges over
// −1 .. the set's least capacity + 1.
func FuzzModel(f *testing.F) {
	f.Add(uint8(2), uint8(2), uint8(0), uint8(0), []byte{2, 1, 1, 2, 2, 1, 2, 3, 1, 0, 100, 1, 2, 4, 3, 2, 1, 1, 36, 1, 0, 2, 2, 2})
	f.Add(uint8(4), uint8(0), uint8(9), uint8(0), []byte{2, 0, 5, 2, 1, 5, 2, 2, 5, 2, 3, 5, 1, 1, 0, 2, 0, 1, 2, 4, 2, 0, 50, 30, 2, 5, 2})
	f.Add(uint8(0), uint8(9), uint8(4), uint8(0), []byte{2, 0, 2, 2, 1, 2, 2, 2, 2, 2, 3, 2, 120, 255, 255, 2, 4, 2, 2, 0, 1})
	f.Add(uint8(9), uint8(6), uint8(17), uint8(0), []byte{2, 1, 11, 2, 2, 11, 3, 3, 11, 40, 255, 0, 2, 4, 11, 2, 5, 11, 1, 9, 9, 2, 1, 0})
	f.Add(uint8(1), uint8(3), uint8(26), uint8(0), []byte{2, 0, 3, 2, 1, 3, 2, 2, 3, 2, 3, 3, 2, 4, 3, 2, 5, 3, 80, 0, 1, 2, 0, 1, 2, 1, 1})
	f.Add(uint8(3), uint8(7), uint8(3), uint8(0), []byte{2, 0, 4, 2, 1, 4, 4, 200, 0, 2, 0, 4, 2, 2, 4, 5, 3, 0, 2, 1, 4, 2, 3, 1})
	f.Add(uint8(2), uint8(2), uint8(12), uint8(0), []byte{2, 0, 3, 2, 1, 3, 2, 2, 3, 2, 3, 3, 2, 4, 3, 2, 5, 3, 4, 0, 40, 2, 0, 0, 2, 5, 1, 1, 0, 9, 2, 1, 4, 2, 3, 1})
	f.Add(uint8(5), uint8(3), uint8(2), uint8(0), []byte{2, 0, 6, 2, 1, 6, 2, 2, 6, 2, 3, 6, 2, 4, 6, 2, 5, 6, 2, 0, 1, 16, 9, 9, 2, 4, 1, 2, 5, 1, 2, 0, 1})
	// Stale readings: a key drained at a later reading, then a denial, a
	// peek and a conversion with an older one.
	f.Add(uint8(1), uint8(2), uint8(0), uint8(0), []byte{2, 1, 2, 120, 0, 10, 2, 1, 3, 121, 0, 5, 2, 1, 2, 2, 1, 1})
	f.Add(uint8(1), uint8(2), uint8(0), uint8(12), []byte{2, 1, 2, 120, 0, 10, 2, 1, 3, 121, 0, 5, 7, 1, 1, 2, 1, 1, 120, 0, 5, 7, 1, 1})
	// Conversions, carry-overs to a faster rate and back, a second Name,
	// and new keys at the bound (both policies) meanwhile.
	f.Add(uint8(4), uint8(2), uint8(11), uint8(45), []byte{2, 0, 5, 2, 1, 5, 7, 1, 0, 3, 1, 5, 11, 1, 2, 4, 1, 9, 2, 2, 1, 0, 3, 9, 2, 3, 1, 15, 0, 3, 2, 4, 1, 124, 0, 2, 2, 5, 1, 19, 1, 0, 2, 0, 1})
	f.Add(uint8(3), uint8(3), uint8(1), uint8(45), []byte{2, 0, 4, 7, 0, 0, 3, 1, 4, 7, 1, 0, 2, 2, 1, 100, 0, 30, 2, 3, 1, 125, 0, 9, 11, 0, 2, 2, 4, 1, 15, 0, 1, 3, 5, 2})
	f.Add(uint8(2), uint8(4), uint8(10), uint8(200), []byte{2, 0, 3, 7, 0, 1, 104, 0, 9, 7, 1, 2, 2, 2, 2, 11, 0, 1, 2, 3, 2, 105, 0, 3, 2, 4, 1, 7, 0, 0, 2, 5, 1})
	// An evicted key comes back with older readings: it restarts no
	// earlier than the latest time its bucket was empty (one extra burst).
	f.Add(uint8(0), uint8(2), uint8(0), uint8(0), []byte{2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 121, 0, 11, 2, 2, 2, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2, 120, 0, 1, 2, 1, 2})
	// A carry-over to a faster rate moves a key's full-at time earlier; a
	// new key at the bound finds it full (RefuseNew).
	f.Add(uint8(9), uint8(2), uint8(11), uint8(41), []byte{2, 1, 11, 120, 0, 1, 2, 2, 11, 7, 2, 1, 120, 0, 1, 2, 3, 2})
	// A bucket full under its limit is full under a larger capacity.
	f.Add(uint8(2), uint8(2), uint8(4), uint8(6), []byte{2, 1, 2, 120, 0, 10, 7, 1, 1, 7, 1, 8})
	f.Fuzz(func(t *testing.T, capSel, rateSel, cfgSel, mix uint8, ops []byte) {
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
		P := admit.Limit{Capacity: capacity, Rate: rate}
		P2 := admit.Limit{Capacity: int64(mix%7) + 1, Rate: rates[int(mix/7)%len(rates)]}
		O := admit.Limit{Name: "o", Capacity: int64(mix/70%4) + 1, Rate: rates[int(mix/3)%len(rates)]}
		sets := [][]admit.Limit{{P}, {P2}, {P, O}, {O}, {P2, O}}
		params := func(lim admit.Limit) refill.Params {
			p, err := refill.NewParams(lim.Capacity, lim.Rate)
			require.NoError(t, err)
			return p
		}
		// clk is where the fuzzer's steps have taken the clock: a step back
		// makes the following calls' readings stale, as a call's that lost
		// a race is. The limiter reads rc, on which each call's first
		// reading is clk's and every later one the present, the latest
		// reading so far (see raceClock): time itself never runs back.
		const t0 = -12345
		clk := buckettest.NewFakeClock(t0)
		rc := newRaceClock(t0)
		l, err := keyed.New(capacity, rate, admit.WithClock(rc), keyed.WithMaxKeys(maxKeys),
			keyed.WithShards(shards), keyed.WithPolicy(policy))
		require.NoError(t, err)
		p := params(P)

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
			km := &keyModel{b: newBucket(), inSync: true, wins: map[string]*window{}}
			for range len(ops)/3 + 1 {
				km.spares = append(km.spares, newBucket())
			}
			model[k] = km
		}
		absentAt := make([]int64, shards)
		elapsed := func() int64 {
			d := clk.Now() - t0
			return min(max(d, 0), refill.Horizon)
		}
		// fullAt is the elapsed time at which every bucket of km is full.
		fullAt := func(km *keyModel) int64 {
			if !km.multi {
				return p.When(0, km.z+p.Cap)
			}
			at := int64(0)
			for _, s := range km.lims {
				at = max(at, s.p.When(0, s.z+s.p.Cap))
			}
			return at
		}
		isFull := func(km *keyModel, t int64) bool { return fullAt(km) <= t }
		// lastTime is the latest time the limiter knows a held key to have
		// seen: a multi-limit key's time, or a single-limit key's time word
		// and the instant its bucket was last empty.
		lastTime := func(km *keyModel) int64 {
			if km.multi {
				return km.last
			}
			return max(km.at, p.When(0, km.z))
		}
		// record checks an admission of n from each of lims on km, made
		// within [lo, hi].
		record := func(op int, key string, km *keyModel, lims []admit.Limit, lo, hi, n int64) {
			for _, lim := range lims {
				w := km.wins[lim.Name]
				if w == nil || w.lim != lim {
					w = newWindow(lim) // a new Name, or its Capacity or Rate changed
					km.wins[lim.Name] = w
				}
				require.True(t, w.admit(lo, hi, n, km.evictions), "op %d: key %q, limit %+v: a window holds more than capacity + rate × window + 1 + capacity × evictions", op, key, lim)
			}
		}
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
			km := model[key]
			call := []admit.Limit{P} // the limits the call applies
			viaLimits := op%4 == 3 && mix != 0
			if viaLimits {
				call = sets[int(op/4)%len(sets)]
			}
			minCap := call[0].Capacity
			for _, lim := range call[1:] {
				minCap = min(minCap, lim.Capacity)
			}
			n := int64(b)%(minCap+3) - 1
			r := elapsed()
			latest = max(latest, r)
			rc.read(clk.Now())
			var dec admit.Decision
			if viaLimits {
				dec, err = l.AllowLimits(context.Background(), key, n, call...)
			} else {
				dec, err = l.AllowN(context.Background(), key, n)
			}
			if n < 0 || n > minCap {
				require.ErrorIs(t, err, admit.ErrUnsatisfiable, "op %d: n=%d", i/3, n)
				require.False(t, dec.Allowed)
				require.Equal(t, stats, l.Stats(), "op %d: a bad n touches nothing", i/3)
				continue
			}
			// The call takes the one-limit path when it applies the
			// limiter's own limit alone to a key that is not a multi-limit
			// entry; otherwise the key is (or becomes) one.
			single := len(call) == 1 && call[0] == P && !(km.held && km.multi)
			si := l.ShardOf(key)
			heldBefore := 0
			for _, k := range modelKeys {
				if model[k].held {
					heldBefore++
				}
			}
			now := l.Stats()
			// The call's time, as the limiter applies it: a held key's
			// latest, or a new key's shard's removal time.
			tc := r
			if km.held {
				tc = max(r, lastTime(km))
			} else {
				tc = max(r, absentAt[si])
			}
			anyFull := false
			for _, k := range modelKeys {
				if model[k].held && isFull(model[k], tc) {
					anyFull = true
				}
			}
			// Every key that left the table was full at the call's time (a
			// drop), or is the call's one eviction, or was dropped by the
			// new key's insertion, whose hand looks at its shard's slots
			// before the new bucket is stored, at its time: the call's, or
			// later when a key removed from that shard by this call had seen
			// a later time (a new bucket starts no earlier). Whether the
			// call evicted is in Stats.
			var removed, live []string
			for _, k := range modelKeys {
				if mk := model[k]; mk.held && !l.Held(k) {
					removed = append(removed, k)
					if !isFull(mk, tc) {
						live = append(live, k)
					}
				}
			}
			// removedAt is the time the removal of key o leaves in its
			// shard: the latest time the limiter knows it to have seen, and
			// for a single-limit key's eviction the clock read after it (the
			// present: see raceClock), which no time the key applied is after.
			removedAt := func(o string, evicted bool) int64 {
				if evicted && !model[o].multi {
					return max(lastTime(model[o]), latest)
				}
				return lastTime(model[o])
			}
			// handDrop reports whether live key k can be a drop by the
			// insertion's hand, if ev is the call's eviction (or ""): full
			// at the latest time the other keys removed from the shard may
			// have raised the shard's to.
			handDrop := func(k string, ev *string) bool {
				if km.held || l.ShardOf(k) != si {
					return false
				}
				t2 := tc
				for _, o := range removed {
					if o != k && l.ShardOf(o) == si {
						t2 = max(t2, removedAt(o, ev != nil && o == *ev))
					}
				}
				return isFull(model[k], t2)
			}
			evicted := -1 // index in live ("" is a key)
			if now.Evictions > stats.Evictions {
				for ei, e := range live {
					ok := true
					for _, k := range live {
						ok = ok && (k == e || handDrop(k, &e))
					}
					if ok {
						evicted = ei
						break
					}
				}
			} else {
				for _, k := range live {
					require.True(t, handDrop(k, nil), "op %d: %q left the table with a bucket not full, and nothing was evicted", i/3, k)
				}
				live = nil
			}
			require.True(t, len(live) == 0 || evicted >= 0, "op %d: %d keys left the table with buckets not full (%q): one eviction per call, and what the insertion drops is full", i/3, len(live), live)
			var drops, evictions uint64
			for _, k := range removed {
				mk := model[k]
				mk.held = false
				absentAt[l.ShardOf(k)] = max(absentAt[l.ShardOf(k)], removedAt(k, evicted >= 0 && k == live[evicted]), tc)
				mk.multi, mk.lims = false, nil
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
				mk.evictions++ // its client restarts full: one more burst in its windows
			}
			if !km.held {
				// A new bucket starts no earlier than the latest time of a key
				// removed from its shard, this call's removals included.
				tc = max(r, absentAt[si])
			}
			lo := max(km.latest, r) // when an admission happened: in [lo, latest]
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
						first = min(first, until(tc, fullAt(model[k])))
					}
				}
				require.Positive(t, dec.RetryAfter, "op %d: a refusal with no wait", i/3)
				require.Equal(t, first, dec.RetryAfter, "op %d: RetryAfter is the time until the first held bucket is full", i/3)
				require.Equal(t, stats.Refusals+1, now.Refusals, "op %d: refusal counted", i/3)
			} else {
				require.NoError(t, err, "op %d", i/3)
				var exp admit.Decision
				switch {
				case single:
					var z int64
					exp, z = expectSingle(km, &p, capacity, tc, n)
					if n > 0 && km.held {
						km.z = max(km.z, z)
					} else if n > 0 {
						km.held, km.multi, km.at, km.z = true, false, tc, z
					} else if !km.held {
						absentAt[si] = tc // a peek at a key not held stores its time in the shard's
					} else {
						// A peek changes nothing in z (at a full bucket it
						// would raise z to V(tc) − Cap); it records its time
						// instead. Decisions cannot tell the two apart (a
						// later call applies at least km.at), but whether the
						// bucket is full at an older call's time, when another
						// key's call looks for room, can: the model keeps the
						// limiter's representation.
						km.at = max(km.at, tc)
					}
					if km.inSync && r >= km.latest {
						modelClk.Set(t0 + tc)
						require.Equal(t, exp.Allowed, km.b.TryAcquireN(n), "op %d: mutexbucket disagrees", i/3)
					} else if exp.Allowed && n > 0 {
						km.inSync = false
					}
				case !km.held && n == 0:
					// A peek at a key not held: every limit full, nothing
					// stored but its time, in the shard's.
					absentAt[si] = max(absentAt[si], r)
					exp = admit.Decision{Allowed: true, Remaining: math.MaxInt64}
					for _, lim := range call {
						if lim.Capacity < exp.Remaining {
							exp.Remaining, exp.Limit, exp.Policy = lim.Capacity, lim.Capacity, lim.Name
						}
					}
				default:
					switch {
					case !km.held:
						km.held, km.multi, km.last, km.lims = true, true, tc, nil
					case !km.multi:
						// Converted: the key's state moves over, at the present
						// (the clock read after the old entry stopped taking
						// calls), which no time the key applied is after.
						km.multi, km.last = true, latest
						km.lims = []limModel{{lim: P, p: p, z: km.z}}
						km.inSync = false
					}
					exp = expectMulti(km, call, params, max(r, km.last), n)
					// A call that brings other parameters for a Name carries it
					// over, admitted or not: the bound holds per window in which
					// a Name's Capacity and Rate do not change, so its window
					// starts again.
					for _, lim := range call {
						if w := km.wins[lim.Name]; w != nil && w.lim != lim {
							km.wins[lim.Name] = newWindow(lim)
						}
					}
				}
				require.Equal(t, exp, dec, "op %d: %q n=%d limits %v at %d (reading %d)", i/3, key, n, call, tc, r)
				// What no Decision may break, whatever the model says.
				slowest, fill := time.Duration(0), time.Duration(0)
				for _, lim := range call {
					lp := params(lim)
					slowest = max(slowest, until(0, lp.When(0, lp.Units(n))))
					fill = max(fill, until(0, lp.When(0, lp.Cap)))
				}
				if n == 0 {
					require.True(t, dec.Allowed, "op %d: a peek denied", i/3)
				}
				if !dec.Allowed {
					require.Positive(t, dec.RetryAfter, "op %d: a denial with no wait", i/3)
					require.LessOrEqual(t, dec.RetryAfter, slowest, "op %d: a denial of %d waits longer than the slowest limit takes to produce them", i/3, n)
				}
				require.LessOrEqual(t, dec.ResetAfter, fill, "op %d: a reset longer than the slowest limit takes to fill", i/3)
				if dec.Allowed && n > 0 {
					record(i/3, key, km, call, lo, latest, n)
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

// expectSingle is the Decision of n on a single-limit key (held or not) at
// the elapsed time tc the limiter applies: for a held key the later of the
// reading and its latest time, at which V(tc) >= z.
// It also returns the key's empty point after the call.
func expectSingle(km *keyModel, p *refill.Params, capacity, tc, n int64) (admit.Decision, int64) {
	v := p.V(tc)
	z := v - p.Cap
	if km.held {
		z = max(km.z, z)
	}
	need := p.Units(n)
	ok := v-z >= need
	left := max(v-z, 0)
	if ok && n > 0 {
		z += need
		left -= need
	}
	d := admit.Decision{Allowed: ok, Limit: capacity, Remaining: left >> p.Shift}
	if z > v-p.Cap {
		d.ResetAfter = until(tc, p.When(tc, z+p.Cap))
	}
	if !ok {
		d.RetryAfter = until(tc, p.When(tc, z+need))
	}
	return d, z
}

// expectMulti is the Decision of n against call on the multi-limit key km
// at elapsed time t (the later of the reading and km's latest time), by
// admit.PolicyLimiter's rules, and commits it to km: a Name km holds with
// the same Capacity and Rate decides on its state; one held with others
// carries its balance over (full stays full; otherwise advanced at the old
// rate, in the new units rounded down, clamped to the new capacity); one
// not held is full. All or nothing; a Name new to km is stored only when
// taken from.
func expectMulti(km *keyModel, call []admit.Limit, params func(admit.Limit) refill.Params, t, n int64) admit.Decision {
	type part struct {
		p     refill.Params
		j     int
		z, v  int64
		ok    bool
		limit admit.Limit
	}
	parts := make([]part, len(call))
	allowed := true
	for i, lim := range call {
		c := &parts[i]
		c.limit, c.p, c.j = lim, params(lim), -1
		for j := range km.lims {
			if km.lims[j].lim.Name == lim.Name {
				c.j = j
			}
		}
		c.v = c.p.V(t)
		full := c.v - c.p.Cap
		switch {
		case c.j < 0:
			c.z = full
		case km.lims[c.j].lim == lim:
			c.z = max(km.lims[c.j].z, full)
		default:
			old := &km.lims[c.j]
			bal := min(max(old.p.V(t)-old.z, 0), old.p.Cap)
			switch {
			case bal == old.p.Cap:
				bal = c.p.Cap
			case old.p.Shift >= c.p.Shift:
				bal >>= old.p.Shift - c.p.Shift
			case bal > c.p.Cap>>(c.p.Shift-old.p.Shift): // finer units: the shift would pass the capacity (or overflow)
				bal = c.p.Cap
			default:
				bal <<= c.p.Shift - old.p.Shift
			}
			c.z = c.v - min(bal, c.p.Cap)
		}
		c.ok = c.v-c.z >= c.p.Units(n)
		allowed = allowed && c.ok
	}
	d := admit.Decision{Allowed: allowed, Remaining: math.MaxInt64}
	fewest, longest := -1, -1
	var wait time.Duration
	for i := range parts {
		c := &parts[i]
		if allowed && n > 0 {
			c.z += c.p.Units(n)
		}
		switch {
		case c.j >= 0:
			km.lims[c.j] = limModel{lim: c.limit, p: c.p, z: c.z}
		case allowed && n > 0:
			km.lims = append(km.lims, limModel{lim: c.limit, p: c.p, z: c.z})
		}
		if rem := max(c.v-c.z, 0) >> c.p.Shift; rem < d.Remaining {
			d.Remaining, fewest = rem, i
		}
		if c.z > c.v-c.p.Cap {
			d.ResetAfter = max(d.ResetAfter, until(t, c.p.When(t, c.z+c.p.Cap)))
		}
		if !c.ok {
			if w := until(t, c.p.When(t, c.z+c.p.Units(n))); longest < 0 || w > wait {
				wait, longest = w, i
			}
		}
	}
	km.last = t
	pick := fewest
	if !allowed {
		d.RetryAfter, pick = wait, longest
	}
	d.Limit, d.Policy = call[pick].Capacity, call[pick].Name
	return d
}
