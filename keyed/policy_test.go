package keyed_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
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
