package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/internal/refill"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/mutexbucket"
)

// FuzzLimits drives keyed.AllowLimits (and AllowN of a NewLimits limiter of
// all k limits, or of the first alone: then AllowN is the lock-free path,
// and keys are converted to multi-limit entries when a call names the
// others) with k = 1..4 limits over two keys, each call naming a non-empty subset
// of the limits, on a fake clock that only moves forward, beside a model of
// k independent mutexbuckets per key queried all or nothing: the call is
// allowed exactly when every named limit's mutexbucket holds n, an
// admission takes n from each (TryAcquireN true for each), a denial from
// none (TryAcquireN false on a limit that lacks n, nothing else touched).
// A shadow of each bucket, advanced with refill.Params.Refill as
// mutexbucket does, gives the exact Decision: Policy, Limit, Remaining,
// RetryAfter (binary search on Refill) and ResetAfter, by rule 4 of
// admit.PolicyLimiter.
//
// ops is read three bytes at a time: op%3 == 0 advances the clock by
// a<<(b%40) ns; otherwise a call on key (op/3)%2 asks for
// n = a%(least capacity + 2) − 1 from the subset b%2^k of the limits, all
// of them when that is 0 (through AllowN when op%3 == 1).
func FuzzLimits(f *testing.F) {
	f.Add(uint8(2), []byte{3, 2, 7, 10, 30, 1, 2, 1, 1, 1, 5, 0, 2, 3, 2, 30, 1, 2, 1, 1, 1, 0})
	f.Add(uint8(3), []byte{1, 3, 0, 2, 1, 5, 1, 1, 3, 0, 200, 20, 4, 2, 6, 1, 1, 0, 2, 2, 2})
	f.Add(uint8(0), []byte{1, 2, 0, 1, 2, 0, 0, 100, 30, 1, 1, 0, 2, 1, 1})
	f.Add(uint8(7), []byte{1, 1, 1, 2, 2, 2, 4, 3, 3, 0, 5, 33, 1, 3, 1, 2, 4, 2, 0, 9, 36, 1, 2, 0})
	f.Add(uint8(9), []byte{1, 2, 0, 4, 1, 0, 1, 1, 0, 2, 2, 3, 0, 200, 28, 1, 3, 0, 2, 1, 1, 4, 2, 0, 1, 1, 0})
	f.Add(uint8(11), []byte{1, 3, 0, 1, 2, 0, 2, 1, 7, 0, 50, 30, 4, 3, 0, 2, 2, 5, 1, 1, 0, 2, 3, 6})
	f.Fuzz(func(t *testing.T, sel uint8, ops []byte) {
		if len(ops) > 600 {
			ops = ops[:600]
		}
		k := int(sel%4) + 1
		pool := []admit.Limit{
			{Name: "burst", Capacity: 3, Rate: 2},
			{Name: "minute", Capacity: 10, Rate: 1.0 / 3},
			{Name: "day", Capacity: 25, Rate: 0.5},
			{Name: "", Capacity: 5, Rate: 7.3},
		}
		if sel/4%2 == 1 {
			pool[0], pool[3] = pool[3], pool[0]
		}
		limits := pool[:k]
		const t0 = 777
		clk := buckettest.NewFakeClock(t0)
		// primary: the limiter's own limit is the first one alone, so AllowN
		// takes the lock-free path and the first AllowLimits naming another
		// limit converts the key, carrying the first limit's state over.
		primary := sel/8%2 == 1
		own := limits
		if primary {
			own = limits[:1]
		}
		l, err := keyed.NewLimits(own, admit.WithClock(clk))
		require.NoError(t, err)
		ps := make([]refill.Params, k)
		minCap := int64(math.MaxInt64)
		for i, lm := range limits {
			ps[i], err = refill.NewParams(lm.Capacity, lm.Rate)
			require.NoError(t, err)
			minCap = min(minCap, lm.Capacity)
		}
		modelClk := buckettest.NewFakeClock(t0)
		type bucket struct {
			mb           *mutexbucket.Bucket
			tokens, last int64
		}
		model := [2][]bucket{}
		for key := range model {
			for i, lm := range limits {
				mb, err := mutexbucket.New(lm.Capacity, lm.Rate, admit.WithClock(modelClk))
				require.NoError(t, err)
				model[key] = append(model[key], bucket{mb: mb, tokens: ps[i].Cap})
			}
		}
		wait := refillWait
		for i := 0; i+2 < len(ops); i += 3 {
			op, a, b := ops[i], ops[i+1], ops[i+2]
			if op%3 == 0 {
				clk.Advance(time.Duration(int64(a) << (b % 40)))
				continue
			}
			key := int(op/3) % 2
			n := int64(a)%(minCap+2) - 1
			mask := int(b) % (1 << k)
			viaAllowN := mask == 0 && op%3 == 1
			var named []int
			for j := range k {
				if (mask == 0 || mask&(1<<j) != 0) && (j == 0 || !viaAllowN || !primary) {
					named = append(named, j)
				}
			}
			call := make([]admit.Limit, len(named))
			for c, j := range named {
				call[c] = limits[j]
			}
			var dec admit.Decision
			if viaAllowN {
				dec, err = l.AllowN(context.Background(), fmt.Sprint("key", key), n)
			} else {
				dec, err = l.AllowLimits(context.Background(), fmt.Sprint("key", key), n, call...)
			}
			if n < 0 {
				require.ErrorIs(t, err, admit.ErrUnsatisfiable, "op %d", i/3)
				require.False(t, dec.Allowed)
				continue
			}
			require.NoError(t, err, "op %d", i/3)
			at := clk.Now() - t0
			modelClk.Set(clk.Now())
			bal := make([]int64, len(named))
			allowed := true
			for c, j := range named {
				bk := &model[key][j]
				bk.tokens, bk.last = ps[j].Refill(bk.tokens, bk.last, at)
				bal[c] = bk.tokens
				allowed = allowed && bal[c] >= ps[j].Units(n)
			}
			exp := admit.Decision{Allowed: allowed, Remaining: math.MaxInt64}
			var longest time.Duration
			first := true
			for c, j := range named {
				bk := &model[key][j]
				need := ps[j].Units(n)
				if allowed {
					require.True(t, bk.mb.TryAcquireN(n), "op %d: mutexbucket %s lacks what the model says it holds", i/3, limits[j].Name)
					bk.tokens -= need
				} else if bal[c] < need {
					require.False(t, bk.mb.TryAcquireN(n), "op %d: mutexbucket %s holds what the model says it lacks", i/3, limits[j].Name)
				}
				if rem := bk.tokens >> ps[j].Shift; rem < exp.Remaining {
					exp.Remaining = rem
					if allowed {
						exp.Policy, exp.Limit = limits[j].Name, limits[j].Capacity
					}
				}
				if bk.tokens < ps[j].Cap {
					exp.ResetAfter = max(exp.ResetAfter, wait(&ps[j], bk.tokens, at, ps[j].Cap))
				}
				if !allowed && bal[c] < need {
					if w := wait(&ps[j], bal[c], at, need); first || w > longest {
						longest, first = w, false
						exp.Policy, exp.Limit = limits[j].Name, limits[j].Capacity
					}
				}
			}
			exp.RetryAfter = longest
			require.Equal(t, exp, dec, "op %d: key %d, n %d, limits %v at %d", i/3, key, n, call, at)
		}
	})
}

// refillWait is the exact time from elapsed time at until a balance of bal
// units at at, refilled by p, holds need units (binary search on Refill),
// or math.MaxInt64 if it never does.
func refillWait(p *refill.Params, bal, at, need int64) time.Duration {
	if bal >= need {
		return 0
	}
	if got, _ := p.Refill(bal, at, refill.Horizon); got < need {
		return time.Duration(math.MaxInt64)
	}
	lo, hi := at, refill.Horizon
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

// TestLimitsCarryOverModel is FuzzLimits' exact model with what it leaves
// out: limit changes (each Name comes in variants of other capacities and
// rates, so calls carry balances over), a clock that steps back (where the
// limiter's own limits are two, so no key converts: see convert), peeks
// and denials that apply a carry-over, and AllowN. The model keeps per
// (key, Name) the limit, its balance in units and the time it applied,
// and per key the latest time any call applied (a call applies the later
// of its reading and that); a carry-over advances the balance to the time
// applied under the old limit, keeps a full bucket full, and otherwise
// converts it to the new limit's units (rounded down) and clamps it to the
// new capacity, as admit.PolicyLimiter's rule 3 says. Every Decision must
// equal the model's (rule 4), so a refusal that took from any limit, or an
// admission a limit could not hold, shows at once or at the next call that
// names that limit. Four more modes bound the keys (WithMaxKeys(2) over
// four, EvictLRU and RefuseNew, on a clock that only moves forward and on
// one that steps back): a key the limiter no longer holds starts full in
// the model, at the shard's absentAt (the latest time its removed keys
// applied, the readings that removed them, peeks at keys not held) if that
// is later than the reading, and a refused new key takes nothing. One mode
// adds Names from a pool past MaxNames, slow to refill: the model tracks
// which Names the key holds (an admission that brings new Names first
// forgets the key's other full ones) and expects the refusal past
// MaxNames exactly (ErrUnavailable, nothing taken, no carry-over applied,
// RetryAfter until enough other Names are full). KEYED_WALKS sets the
// seeds (300 passed when it was written).
func TestLimitsCarryOverModel(t *testing.T) {
	variants := map[string][]admit.Limit{
		"":  {{Name: "", Capacity: 5, Rate: 2}, {Name: "", Capacity: 7, Rate: 2}, {Name: "", Capacity: 2, Rate: 9}},
		"a": {{Name: "a", Capacity: 3, Rate: 1}, {Name: "a", Capacity: 8, Rate: 0.5}, {Name: "a", Capacity: 3, Rate: 4}},
		"b": {{Name: "b", Capacity: 10, Rate: 1.0 / 3}, {Name: "b", Capacity: 2, Rate: 1e-6}, {Name: "b", Capacity: 1000, Rate: 250}},
		"c": {{Name: "c", Capacity: 1, Rate: 0}, {Name: "c", Capacity: 4, Rate: 3.7}},
	}
	names := []string{"", "a", "b", "c"}
	type state struct {
		lim     admit.Limit
		p       refill.Params
		bal, at int64
	}
	params := map[admit.Limit]refill.Params{}
	paramsOf := func(lm admit.Limit) refill.Params {
		p, ok := params[lm]
		if !ok {
			var err error
			p, err = refill.NewParams(lm.Capacity, lm.Rate)
			require.NoError(t, err)
			params[lm] = p
		}
		return p
	}
	var pool []admit.Limit // Names enough to pass MaxNames, slow to refill
	for i := range keyed.MaxNames + 6 {
		pool = append(pool, admit.Limit{Name: fmt.Sprintf("p%02d", i), Capacity: 2, Rate: 0.001})
	}
	refusals := 0
	defer func() {
		if !t.Failed() && refusals == 0 {
			t.Error("no call was refused for MaxNames: the walk does not reach the bound")
		}
	}()
	for seed := range uint64(walkCount(3)) {
		for mode := range 7 {
			backward := mode == 1 || mode >= 5
			many := mode == 4                              // calls bring Names from a pool past MaxNames too
			bounded := mode == 2 || mode == 3 || mode >= 5 // WithMaxKeys(2) over four keys
			refuse := mode == 3 || mode == 6               // RefuseNew (else EvictLRU)
			r := rand.New(rand.NewPCG(seed, 11))
			const t0 = 1_000_000_000
			clk := buckettest.NewFakeClock(t0)
			own := []admit.Limit{variants[""][0]}
			if backward {
				own = append(own, variants["a"][0]) // never single: no conversions
			}
			opts := []admit.Option{admit.WithClock(clk)}
			keys := []string{"k0", "k1"}
			if bounded {
				opts = append(opts, keyed.WithMaxKeys(2), keyed.WithShards(1))
				keys = append(keys, "k2", "k3")
				if refuse {
					opts = append(opts, keyed.WithPolicy(keyed.RefuseNew))
				}
			}
			l, err := keyed.NewLimits(own, opts...)
			require.NoError(t, err)
			model := map[string]map[string]*state{}
			last := map[string]int64{}   // per key, the latest time applied
			heldKey := map[string]bool{} // per key, whether the limiter holds it
			absentAt := int64(0)         // the shard's (WithShards(1) where bounded)
			for _, k := range keys {
				model[k] = map[string]*state{}
			}
			ctx := context.Background()
			for step := range 1500 {
				switch x := r.IntN(10); {
				case x == 0:
					clk.Advance(time.Duration(r.Int64N(3_000_000_000)))
				case x == 1:
					clk.Advance(time.Duration(r.Int64N(4)))
				case x == 2 && backward:
					clk.Set(max(t0, clk.Now()-r.Int64N(2_000_000_000)))
				case x == 3 && r.IntN(10) == 0 && !many:
					clk.Advance(time.Duration(r.Int64N(1000)) * time.Second)
				}
				key := keys[r.IntN(len(keys))]
				var call []admit.Limit
				viaN := r.IntN(5) == 0
				if viaN {
					call = own
				} else {
					for _, i := range r.Perm(len(names))[:1+r.IntN(len(names))] {
						vs := variants[names[i]]
						call = append(call, vs[r.IntN(len(vs))])
					}
				}
				if many && !viaN && r.IntN(4) != 0 {
					if r.IntN(2) == 0 {
						call = call[:0] // the pool's Names alone
					}
					for _, i := range r.Perm(len(pool))[:1+r.IntN(3)] {
						call = append(call, pool[i])
					}
				}
				minCap := minCapacity(call)
				n := walkCost(r, minCap, 12)
				var d admit.Decision
				if viaN {
					d, err = l.AllowN(ctx, key, n)
				} else {
					d, err = l.AllowLimits(ctx, key, n, call...)
				}
				// formatted only on a failure
				where := []any{"seed %d mode %d step %d: key %s n %d limits %v at %d", seed, mode, step, key, n, call, clk.Now() - t0}
				if n < 0 || n > minCap {
					require.ErrorIs(t, err, admit.ErrUnsatisfiable, where...)
					require.False(t, d.Allowed, where...)
					continue
				}
				// A key the limiter no longer holds was full (a drop, exact)
				// or evicted (EvictLRU): it restarts full, holding no Name,
				// at a time no earlier than any the shard's removed keys
				// applied, nor the reading of the call that removed them
				// (absentAt), nor any peek at a key not held.
				reading := clk.Now() - t0
				wasHeld := heldKey[key]
				for _, k := range keys {
					h := l.Held(k)
					if !h {
						clear(model[k])
						if heldKey[k] {
							absentAt = max(absentAt, last[k], reading)
						}
					}
					heldKey[k] = h
				}
				if !wasHeld {
					if n == 0 {
						absentAt = max(absentAt, reading)
					} else {
						last[key] = absentAt // a new key starts at max(reading, absentAt)
					}
				}
				if bounded {
					if refuse && errors.Is(err, admit.ErrUnavailable) {
						// RefuseNew: the new key, refused, took nothing.
						require.False(t, d.Allowed, where...)
						require.False(t, l.Held(key), where...)
						continue
					}
				}
				ta := max(clk.Now()-t0, last[key])
				last[key] = ta
				// Each limit's state at ta: its balance (carried over) and
				// whether the key holds it.
				sts := make([]state, len(call))
				held := make([]bool, len(call))
				allowed := true
				for i, lm := range call {
					p := paramsOf(lm)
					sts[i] = state{lim: lm, p: p, bal: p.Cap, at: ta}
					if old := model[key][lm.Name]; old != nil {
						held[i] = true
						bal, _ := old.p.Refill(old.bal, old.at, ta)
						switch {
						case old.lim == lm:
							sts[i].bal = bal
						case bal == old.p.Cap:
							// full under the old limit: full under the new one
						case old.p.Shift >= p.Shift:
							sts[i].bal = min(bal>>(old.p.Shift-p.Shift), p.Cap)
						default:
							sts[i].bal = min(new(big.Int).Lsh(big.NewInt(bal), p.Shift-old.p.Shift).Int64(), p.Cap)
							if bal > p.Cap>>(p.Shift-old.p.Shift) {
								sts[i].bal = p.Cap
							}
						}
					}
					allowed = allowed && sts[i].bal >= p.Units(n)
				}
				if newNames := slices.Contains(held, false); allowed && n > 0 && newNames {
					// Names new to the key: first its other Names that are
					// full are forgotten, then past MaxNames the call is
					// refused, taking nothing and carrying nothing over.
					inCall := map[string]bool{}
					for _, lm := range call {
						inCall[lm.Name] = true
					}
					type kept struct {
						st  *state
						bal int64
					}
					var others []kept // the key's other Names, not full
					for nm, st := range model[key] {
						if inCall[nm] {
							continue
						}
						if bal, _ := st.p.Refill(st.bal, st.at, ta); bal == st.p.Cap {
							delete(model[key], nm)
						} else {
							others = append(others, kept{st, bal})
						}
					}
					if k := len(others) + len(call); k > keyed.MaxNames {
						var fullAt []int64
						for _, o := range others {
							at := int64(math.MaxInt64) // never (a rate of 0)
							if w := refillWait(&o.st.p, o.bal, ta, o.st.p.Cap); w != math.MaxInt64 {
								at = ta + int64(w)
							}
							fullAt = append(fullAt, at)
						}
						slices.Sort(fullAt)
						w := time.Duration(math.MaxInt64)
						if at := fullAt[k-keyed.MaxNames-1]; at != math.MaxInt64 {
							w = time.Duration(at - ta)
						}
						i := slices.Index(held, false)
						require.ErrorIs(t, err, admit.ErrUnavailable, where...)
						require.Equal(t, admit.Decision{Limit: call[i].Capacity, RetryAfter: w, ResetAfter: w, Policy: call[i].Name}, d, where...)
						refusals++
						continue
					}
				}
				require.NoError(t, err, where...)
				exp := admit.Decision{Allowed: allowed, Remaining: math.MaxInt64}
				first := true
				var longest time.Duration
				for i, lm := range call {
					s := &sts[i]
					need := s.p.Units(n)
					bal := s.bal
					if allowed {
						s.bal -= need
					}
					if rem := s.bal >> s.p.Shift; rem < exp.Remaining {
						exp.Remaining = rem
						if allowed {
							exp.Policy, exp.Limit = lm.Name, lm.Capacity
						}
					}
					if s.bal < s.p.Cap {
						exp.ResetAfter = max(exp.ResetAfter, refillWait(&s.p, s.bal, ta, s.p.Cap))
					}
					if !allowed && bal < need {
						if w := refillWait(&s.p, bal, ta, need); first || w > longest {
							longest, first = w, false
							exp.Policy, exp.Limit = lm.Name, lm.Capacity
						}
					}
					// A held Name keeps its (carried) state; a new one is
					// stored only when taken from.
					if held[i] || allowed && n > 0 {
						model[key][lm.Name] = s
					}
				}
				exp.RetryAfter = longest
				require.Equal(t, exp, d, where...)
			}
		}
	}
}
