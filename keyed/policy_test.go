package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/keyedtest"
)

// TestConformanceLimits runs the single-limit suites on limiters from
// NewLimits whose second limit never binds (a burst of 1e9 refilled at
// 1e9/s), so that every call goes through the multi-limit path and must
// decide exactly as one limit does.
func TestConformanceLimits(t *testing.T) {
	factory := func(_ *testing.T, capacity int64, rate float64, opts ...admit.Option) (admit.KeyedLimiter, error) {
		return keyed.NewLimits([]admit.Limit{{Capacity: capacity, Rate: rate}, {Name: "loose", Capacity: 1e9, Rate: 1e9}}, opts...)
	}
	keyedtest.Run(t, factory)
	keyedtest.RunFakeClock(t, factory)
}

// TestLimitsStorm: on a New limiter, goroutines mix AllowN (the lock-free
// single-limit path) with AllowLimits naming the same limit and a second
// one, over keys that churn through a small bound, so keys are converted
// to multi-limit entries while other goroutines CAS their word, and are
// dropped and evicted while in use, at GOMAXPROCS 1, 2, 4 and 8.
// Per key, every admission takes from the primary limit, so the primary's
// bound covers all of them; the second limit's bound covers the
// AllowLimits admissions. Both allow a capacity more per eviction.
func TestLimitsStorm(t *testing.T) {
	eachProcs(t, limitsStorm)
}

func limitsStorm(t *testing.T) {
	const capacity, rate, keys, bound = 3, 500.0, 24, 16
	l, err := keyed.New(capacity, rate, keyed.WithMaxKeys(bound), keyed.WithShards(2))
	require.NoError(t, err)
	other := admit.Limit{Name: "other", Capacity: 2, Rate: 200}
	prim := admit.Limit{Capacity: capacity, Rate: rate}
	var all, withOther [keys]atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	g := 4 * runtime.GOMAXPROCS(0)
	begin := time.Now()
	for i := range g {
		wg.Go(func() {
			ctx := context.Background()
			for r := 0; !stop.Load(); r++ {
				k := (r*7 + i*5) % keys
				key := fmt.Sprint("k", k)
				if (r+i)%3 == 0 {
					d, err := l.AllowLimits(ctx, key, 1, prim, other)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						all[k].Add(1)
						withOther[k].Add(1)
					}
					continue
				}
				d, err := l.AllowN(ctx, key, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					all[k].Add(1)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // how long to storm, not an assertion
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(begin).Seconds()
	st := l.Stats()
	assert.Equal(t, st.Inserts, uint64(st.Keys)+st.Drops+st.Evictions)
	assert.LessOrEqual(t, st.Keys, bound)
	var total, totalOther int64
	for k := range keys {
		total += all[k].Load()
		totalOther += withOther[k].Load()
	}
	ev := int64(st.Evictions)
	assert.LessOrEqual(t, float64(total), keys*(capacity+rate*elapsed+1)+float64(capacity*ev), "the primary limit, all keys")
	assert.LessOrEqual(t, float64(totalOther), keys*(float64(other.Capacity)+other.Rate*elapsed+1)+float64(other.Capacity*ev), "the other limit, all keys")
	if ev == 0 {
		for k := range keys {
			assert.LessOrEqual(t, float64(all[k].Load()), capacity+rate*elapsed+1, "key %d, primary", k)
			assert.LessOrEqual(t, float64(withOther[k].Load()), float64(other.Capacity)+other.Rate*elapsed+1, "key %d, other", k)
		}
	}
}

// TestHeldKeyBadCalls: a key that holds its limits is decided without
// ValidateLimits when a call brings limits it holds, each under its own
// state, so every bad call on such a key must still fail exactly as on a
// key never seen (which validates first): the same error text and the same
// Decision, and nothing consumed. Good calls in another order or a subset
// decide as usual.
func TestHeldKeyBadCalls(t *testing.T) {
	ctx := context.Background()
	burst := admit.Limit{Name: "burst", Capacity: 10, Rate: 1}
	daily := admit.Limit{Name: "daily", Capacity: 100, Rate: 0.001}
	with := func(l admit.Limit, f func(*admit.Limit)) admit.Limit { f(&l); return l }
	cases := []struct {
		name   string
		n      int64
		limits []admit.Limit
		want   error
	}{
		{"no limits", 1, nil, admit.ErrInvalidConfig},
		{"no limits, peek", 0, []admit.Limit{}, admit.ErrInvalidConfig},
		{"duplicate", 1, []admit.Limit{burst, burst}, admit.ErrInvalidConfig},
		{"duplicate second", 1, []admit.Limit{burst, daily, daily}, admit.ErrInvalidConfig},
		{"duplicate out of order", 1, []admit.Limit{daily, burst, daily}, admit.ErrInvalidConfig},
		{"capacity 0", 1, []admit.Limit{with(burst, func(l *admit.Limit) { l.Capacity = 0 }), daily}, admit.ErrInvalidConfig},
		{"NaN rate", 1, []admit.Limit{burst, with(daily, func(l *admit.Limit) { l.Rate = math.NaN() })}, admit.ErrInvalidConfig},
		{"+Inf rate", 1, []admit.Limit{burst, with(daily, func(l *admit.Limit) { l.Rate = math.Inf(1) })}, admit.ErrInvalidConfig},
		{"negative rate", 1, []admit.Limit{with(burst, func(l *admit.Limit) { l.Rate = -1 })}, admit.ErrInvalidConfig},
		{"rate above 1e9", 1, []admit.Limit{with(burst, func(l *admit.Limit) { l.Rate = 2e9 })}, admit.ErrInvalidConfig},
		{"bad name after held ones", 1, []admit.Limit{burst, daily, {Name: "x\n", Capacity: 5, Rate: 1}}, admit.ErrInvalidConfig},
		{"bad name, peek", 0, []admit.Limit{{Name: "x\n", Capacity: 5, Rate: 1}}, admit.ErrInvalidConfig},
		{"n above a capacity", 11, []admit.Limit{burst, daily}, admit.ErrUnsatisfiable},
		{"n above a capacity, out of order", 11, []admit.Limit{daily, burst}, admit.ErrUnsatisfiable},
		{"n negative", -1, []admit.Limit{burst, daily}, admit.ErrUnsatisfiable},
		{"reordered", 1, []admit.Limit{daily, burst}, nil},
		{"subset", 1, []admit.Limit{daily}, nil},
		{"same limits", 1, []admit.Limit{burst, daily}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := keyed.NewLimits([]admit.Limit{burst}, admit.WithClock(buckettest.NewFakeClock(0)))
			require.NoError(t, err)
			d, err := l.AllowLimits(ctx, "k", 1, burst, daily)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			held, heldErr := l.AllowLimits(ctx, "k", tc.n, tc.limits...)
			fresh, freshErr := l.AllowLimits(ctx, "never seen", tc.n, tc.limits...)
			if tc.want == nil {
				require.NoError(t, heldErr)
				require.True(t, held.Allowed)
				return
			}
			require.ErrorIs(t, heldErr, tc.want)
			require.Error(t, freshErr)
			require.Equal(t, freshErr.Error(), heldErr.Error(), "a held key's error differs from a new key's")
			require.Equal(t, fresh, held, "a held key's Decision differs from a new key's")
			// Nothing consumed: a peek sees what the first call left.
			d, err = l.AllowLimits(ctx, "k", 0, burst, daily)
			require.NoError(t, err)
			require.Equal(t, int64(9), d.Remaining, "the bad call consumed tokens")
		})
	}
}

// TestPolicyConservationStorm: goroutines share one limiter on a fake
// clock that does not move during a round, so no limit refills and every
// token is accounted for: AllowN (the lock-free path of the limiter's own
// limit "a"), AllowLimits on overlapping subsets of four limits, peeks,
// and bad calls (n above a capacity, two limits with one Name, an
// invalid limit) race on a few keys, converting them to multi-limit
// entries while others CAS their word. After each round, for every (key,
// Name), a peek must show exactly Capacity minus the tokens of the
// admissions that named it: more would be an over-admission, fewer a
// token a denial or a bad call took. Each Name comes in variants of one
// Capacity and other rates (units of other sizes among them), so calls
// carry balances over, on the path that takes the shard's lock too: on a
// still clock a carry-over keeps whole tokens exactly. Under RefuseNew
// with a bound below the keys, refused new keys take nothing and only full
// keys are dropped, so the accounting stays exact. The peeks that check,
// with each Name's first variant, leave every limit at a rate that
// refills; between rounds the clock moves past every fill time. Half the
// calls also bring Names from a pool past MaxNames, so keys reach the
// bound and refuse new Names (ErrUnavailable), taking nothing, while
// others race on them. KEYED_WALKS sets the rounds.
func TestPolicyConservationStorm(t *testing.T) {
	variants := map[string][]admit.Limit{
		"a": {{Name: "a", Capacity: 40, Rate: 1}, {Name: "a", Capacity: 40, Rate: 1e6}, {Name: "a", Capacity: 40, Rate: 2.5}},
		"b": {{Name: "b", Capacity: 30, Rate: 0.5}, {Name: "b", Capacity: 30, Rate: 0}},
		"c": {{Name: "c", Capacity: 25, Rate: 0}},
		"d": {{Name: "d", Capacity: 50, Rate: 3}, {Name: "d", Capacity: 50, Rate: 1e-3}},
	}
	// A pool of Names past MaxNames, slow to refill: a key that has taken
	// from MaxNames of them refuses a call that brings one more, taking
	// nothing (ErrUnavailable).
	var pool []string
	for i := range keyed.MaxNames + 6 {
		nm := fmt.Sprintf("p%02d", i)
		pool = append(pool, nm)
		variants[nm] = []admit.Limit{{Name: nm, Capacity: 2, Rate: 0.001}}
	}
	lims := map[string]admit.Limit{}
	for nm, vs := range variants {
		lims[nm] = vs[0]
	}
	subsets := [][]string{{"a"}, {"a", "b"}, {"b", "c"}, {"a", "c", "d"}, {"d"}, {"b"}, {"c", "a"}, {"d", "b", "c", "a"}}
	var namesRefused atomic.Int64
	for _, refuse := range []bool{false, true} {
		clk := buckettest.NewFakeClock(1_000_000_000)
		opts := []admit.Option{admit.WithClock(clk), keyed.WithShards(2)}
		keys := []string{"k0", "k1", "k2"}
		if refuse {
			opts = append(opts, keyed.WithMaxKeys(2), keyed.WithPolicy(keyed.RefuseNew))
		}
		l, err := keyed.NewLimits([]admit.Limit{lims["a"]}, opts...)
		require.NoError(t, err)
		ctx := context.Background()
		taken := map[string]int64{} // key + "/" + Name
		for round := range walkCount(4) {
			var mu sync.Mutex
			var wg sync.WaitGroup
			var failed atomic.Value
			for g := range 8 {
				wg.Go(func() {
					seed := uint64(round*131 + g)
					x := seed*0x9e3779b97f4a7c15 + 1
					next := func(n int) int {
						x ^= x << 13
						x ^= x >> 7
						x ^= x << 17
						return int(x % uint64(n))
					}
					for i := range 400 {
						if i%50 == 0 {
							runtime.Gosched()
						}
						key := keys[next(len(keys))]
						sub := subsets[next(len(subsets))]
						if next(2) == 0 {
							if next(3) != 0 {
								sub = nil // the pool's Names alone
							}
							sub = slices.Clip(sub)
							for range 1 + next(3) {
								if p := pool[next(len(pool))]; !slices.Contains(sub, p) {
									sub = append(sub, p)
								}
							}
						}
						call := make([]admit.Limit, len(sub))
						minCap := int64(math.MaxInt64)
						for j, nm := range sub {
							call[j] = variants[nm][next(len(variants[nm]))]
							minCap = min(minCap, call[j].Capacity)
						}
						n := int64(next(int(min(4, minCap+1)))) // 0 peeks
						var d admit.Decision
						var err error
						switch next(12) {
						case 0: // n above a capacity
							_, err = l.AllowLimits(ctx, key, minCap+1, call...)
							if !errors.Is(err, admit.ErrUnsatisfiable) {
								failed.Store(fmt.Errorf("n above capacity: %v", err))
							}
							continue
						case 1: // two limits with one Name
							_, err = l.AllowLimits(ctx, key, 1, append(call, call[0].WithBurst(3))...)
							if !errors.Is(err, admit.ErrInvalidConfig) {
								failed.Store(fmt.Errorf("duplicate Name: %v", err))
							}
							continue
						case 2: // a valid limit then an invalid one
							_, err = l.AllowLimits(ctx, key, 1, append(call, admit.Limit{Name: "bad", Capacity: 0, Rate: 1})...)
							if !errors.Is(err, admit.ErrInvalidConfig) {
								failed.Store(fmt.Errorf("invalid limit: %v", err))
							}
							continue
						case 3:
							sub = []string{"a"}
							d, err = l.AllowN(ctx, key, n)
						default:
							d, err = l.AllowLimits(ctx, key, n, call...)
						}
						if err != nil {
							if errors.Is(err, admit.ErrUnavailable) && !d.Allowed {
								if !refuse || strings.Contains(err.Error(), "MaxNames") {
									namesRefused.Add(1)
								}
								continue
							}
							failed.Store(err)
							return
						}
						if n == 0 && !d.Allowed {
							failed.Store(fmt.Errorf("peek denied: %+v", d))
							return
						}
						if d.Allowed && n > 0 {
							mu.Lock()
							for _, nm := range sub {
								taken[key+"/"+nm] += n
							}
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			if err, _ := failed.Load().(error); err != nil {
				t.Fatalf("refuse %v round %d: %v", refuse, round, err)
			}
			for _, key := range keys {
				for nm, lm := range lims {
					d, err := l.AllowLimits(ctx, key, 0, lm)
					if err != nil {
						if refuse && errors.Is(err, admit.ErrUnavailable) {
							continue
						}
						t.Fatalf("refuse %v round %d: peek %s %s: %v", refuse, round, key, nm, err)
					}
					if want := lm.Capacity - taken[key+"/"+nm]; d.Remaining != want {
						t.Errorf("refuse %v round %d: key %s limit %s: Remaining %d, want %d (capacity %d, %d taken)",
							refuse, round, key, nm, d.Remaining, want, lm.Capacity, taken[key+"/"+nm])
					}
				}
			}
			clk.Advance(1e4 * time.Second) // every limit full again, "c" (rate 0) aside
			for id := range taken {
				if !strings.HasSuffix(id, "/c") {
					delete(taken, id)
				}
			}
			if round%2 == 1 {
				// "c" never refills: a new set of keys for the next rounds.
				for i := range keys {
					keys[i] += "x"
				}
			}
		}
	}
	if namesRefused.Load() == 0 {
		t.Error("no call was refused for MaxNames: the storm does not reach the bound")
	}

}
