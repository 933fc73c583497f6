package keyed_test

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
)

func newFake(t *testing.T, capacity int64, rate float64, opts ...admit.Option) (*keyed.Limiter, *buckettest.FakeClock) {
	t.Helper()
	clk := buckettest.NewFakeClock(1 << 40)
	l, err := keyed.New(capacity, rate, append([]admit.Option{admit.WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	return l, clk
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []admit.Option
	}{
		{"maxkeys=0", []admit.Option{keyed.WithMaxKeys(0)}},
		{"maxkeys=-1", []admit.Option{keyed.WithMaxKeys(-1)}},
		{"policy=7", []admit.Option{keyed.WithPolicy(7)}},
		{"shards=0", []admit.Option{keyed.WithShards(0)}},
		{"shards=3", []admit.Option{keyed.WithShards(3)}},
		{"shards=2^17", []admit.Option{keyed.WithShards(1 << 17)}},
		{"shards>maxkeys", []admit.Option{keyed.WithShards(8), keyed.WithMaxKeys(4)}},
		{"nil", []admit.Option{nil}},
	} {
		_, err := keyed.New(1, 1, tc.opts...)
		assert.ErrorIs(t, err, admit.ErrInvalidConfig, tc.name)
	}
	_, err := keyed.New(0, 1)
	assert.ErrorIs(t, err, admit.ErrInvalidConfig)
	assert.ErrorContains(t, err, "capacity 0")
}

func TestDefaults(t *testing.T) {
	for _, tc := range []struct {
		opts           []admit.Option
		maxKeys, shard int
	}{
		{nil, keyed.DefaultMaxKeys, 256},
		{[]admit.Option{keyed.WithMaxKeys(100)}, 100, 1},
		{[]admit.Option{keyed.WithMaxKeys(1000)}, 1000, 8},
		{[]admit.Option{keyed.WithMaxKeys(5), keyed.WithShards(4)}, 5, 4},
	} {
		l, err := keyed.New(1, 1, tc.opts...)
		require.NoError(t, err)
		st := l.Stats()
		assert.Equal(t, tc.maxKeys, st.MaxKeys)
		assert.Equal(t, tc.shard, st.Shards)
		_, share := l.ShardLens()
		sum := 0
		for _, s := range share {
			sum += s
		}
		assert.Equal(t, tc.maxKeys, sum, "the shares add up to the bound")
	}
	assert.Equal(t, "EvictLRU", keyed.EvictLRU.String())
	assert.Equal(t, "RefuseNew", keyed.RefuseNew.String())
	assert.Equal(t, "Policy(9)", keyed.Policy(9).String())
}

// TestDropFull: full buckets leave the table as part of later calls, two
// per call at most, and a peek that finds a held bucket full drops it.
func TestDropFull(t *testing.T) {
	l, clk := newFake(t, 2, 1, keyed.WithShards(1))
	for i := range 10 {
		require.True(t, l.Allow(fmt.Sprint("k", i)))
	}
	assert.Equal(t, 10, l.Len())
	clk.Advance(time.Second) // every bucket is full again
	require.True(t, l.Allow("k9"), "the most recently used key")
	assert.Equal(t, 8, l.Len(), "one call dropped the two least recently used")
	for range 3 {
		d, err := l.AllowN(context.Background(), "absent", 0)
		require.NoError(t, err)
		assert.Equal(t, int64(2), d.Remaining)
	}
	assert.Equal(t, 2, l.Len(), "each call drops up to two; a peek at an absent key stores nothing")
	st := l.Stats()
	assert.Equal(t, uint64(10), st.Inserts)
	assert.Equal(t, uint64(8), st.Drops)
	// k9 was taken from at the later time; k8 refilled.
	assert.True(t, l.Held("k8"))
	d, err := l.AllowN(context.Background(), "k8", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(2), d.Remaining)
	assert.False(t, l.Held("k8"), "a peek that finds a bucket full drops it")
	assert.Equal(t, uint64(9), l.Stats().Drops)
	assert.True(t, l.Held("k9"), "a live bucket stays")
}

// TestEvictLRU: at the bound, a new key evicts the least recently used live
// key, which then restarts full; Stats counts it.
func TestEvictLRU(t *testing.T) {
	l, _ := newFake(t, 3, 1e-3, keyed.WithMaxKeys(3), keyed.WithShards(1))
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, l.Allow(k))
	}
	require.True(t, l.Allow("a"), "a is now the most recently used; b the least")
	require.True(t, l.Allow("d"))
	assert.False(t, l.Held("b"), "b evicted")
	for _, k := range []string{"a", "c", "d"} {
		assert.True(t, l.Held(k), k)
	}
	st := l.Stats()
	assert.Equal(t, uint64(1), st.Evictions)
	assert.Equal(t, 3, st.Keys)
	d, err := l.AllowN(context.Background(), "b", 3)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "an evicted client restarts full")
	assert.False(t, l.Held("c"), "c was the least recently used")
	assert.Equal(t, uint64(2), l.Stats().Evictions)
}

// TestRefuseNew: at the bound, a new key is refused with an error wrapping
// ErrUnavailable and a RetryAfter until the least recently used bucket is
// full; held keys are untouched, and once that bucket is full the new key
// gets its place.
func TestRefuseNew(t *testing.T) {
	l, clk := newFake(t, 2, 1, keyed.WithMaxKeys(2), keyed.WithShards(1), keyed.WithPolicy(keyed.RefuseNew))
	d, err := l.AllowN(context.Background(), "a", 2)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	clk.Advance(500 * time.Millisecond)
	require.True(t, l.Allow("b"))
	d, err = l.AllowN(context.Background(), "c", 1)
	require.ErrorIs(t, err, admit.ErrUnavailable)
	assert.False(t, d.Allowed)
	assert.Equal(t, int64(2), d.Limit)
	assert.Equal(t, 1500*time.Millisecond, d.RetryAfter, "a, the least recently used, is full 2 s after it was drained")
	assert.False(t, l.Allow("c"))
	d, err = l.AllowN(context.Background(), "c", 0)
	require.NoError(t, err, "a peek needs no room")
	assert.Equal(t, int64(2), d.Remaining)
	st := l.Stats()
	assert.Equal(t, uint64(2), st.Refusals)
	assert.Zero(t, st.Evictions)
	assert.True(t, l.Held("a") && l.Held("b"))
	clk.Advance(1500*time.Millisecond - 1)
	_, err = l.AllowN(context.Background(), "c", 1)
	require.ErrorIs(t, err, admit.ErrUnavailable, "a nanosecond early")
	clk.Advance(1)
	d, err = l.AllowN(context.Background(), "c", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "a full, dropped; c takes its place")
	assert.False(t, l.Held("a"))
	assert.False(t, l.Held("b"), "b, full since 1.5 s, dropped by the same call's sweep")
	assert.Equal(t, uint64(2), l.Stats().Drops)
}

// TestRefuseZeroRate: a zero-rate bucket never refills, so a refusal's
// RetryAfter is the largest Duration.
func TestRefuseZeroRate(t *testing.T) {
	l, _ := newFake(t, 1, 0, keyed.WithMaxKeys(1), keyed.WithPolicy(keyed.RefuseNew))
	require.True(t, l.Allow("a"))
	d, err := l.AllowN(context.Background(), "b", 1)
	require.ErrorIs(t, err, admit.ErrUnavailable)
	assert.Equal(t, time.Duration(math.MaxInt64), d.RetryAfter)
}

// TestSpray: a key-spraying caller never grows the table past the bound,
// under either policy, and with EvictLRU a steady client keeps its bucket
// as long as it is among the most recently used.
func TestSpray(t *testing.T) {
	for _, policy := range []keyed.Policy{keyed.EvictLRU, keyed.RefuseNew} {
		t.Run(policy.String(), func(t *testing.T) {
			const bound = 1000
			l, clk := newFake(t, 10, 1, keyed.WithMaxKeys(bound), keyed.WithShards(4), keyed.WithPolicy(policy))
			for i := range 20_000 {
				if i%100 == 0 {
					clk.Advance(time.Millisecond)
				}
				l.Allow(fmt.Sprint("spray-", i))
				require.LessOrEqual(t, l.Len(), bound)
			}
			st := l.Stats()
			held, share := l.ShardLens()
			for i := range held {
				assert.LessOrEqual(t, held[i], share[i])
			}
			if policy == keyed.EvictLRU {
				assert.Positive(t, st.Evictions)
				assert.Zero(t, st.Refusals)
			} else {
				assert.Positive(t, st.Refusals)
				assert.Zero(t, st.Evictions)
			}
			assert.Equal(t, st.Inserts, uint64(st.Keys)+st.Drops+st.Evictions, "every key inserted is held, dropped or evicted")
			clk.Advance(10 * time.Second) // every bucket refills
			// Full buckets are dropped by calls to their own shard: pick
			// later keys until every shard has one.
			var later []string
			seen := map[int]bool{}
			for i := 0; len(seen) < l.Stats().Shards; i++ {
				k := fmt.Sprint("later-", i)
				if !seen[l.ShardOf(k)] {
					seen[l.ShardOf(k)] = true
					later = append(later, k)
				}
			}
			for i := range 3 * bound {
				l.Allow(later[i%len(later)])
			}
			assert.LessOrEqual(t, l.Len(), len(later), "the refilled buckets were dropped by ordinary calls")
		})
	}
}

func TestAllocs(t *testing.T) {
	l, _ := newFake(t, 1e9, 1, keyed.WithMaxKeys(10))
	require.True(t, l.Allow("held"))
	ctx := context.Background()
	assert.Zero(t, testing.AllocsPerRun(1000, func() { l.Allow("held") }), "Allow on a held key")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = l.AllowN(ctx, "held", 3) }), "AllowN on a held key")
	e, _ := newFake(t, 1, 1e-6)
	require.True(t, e.Allow("empty"))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { e.Allow("empty") }), "a denial")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = e.AllowN(ctx, "absent", 0) }), "a peek at an absent key")
	r, _ := newFake(t, 1, 1e-6, keyed.WithMaxKeys(1), keyed.WithPolicy(keyed.RefuseNew))
	require.True(t, r.Allow("a"))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = r.AllowN(ctx, "b", 1) }), "a refusal")
}

// TestConcurrentBound: goroutines over more keys than the bound, on the
// real clock, under both policies. The bound holds whenever a goroutine
// looks. At 1e-3 tokens/s nothing refills during the test, so each bucket
// ever created admits at most its capacity: under RefuseNew every key gets
// at most its capacity, and under EvictLRU the total is at most the capacity
// times the buckets created (Stats.Inserts, one more per eviction).
func TestConcurrentBound(t *testing.T) {
	for _, policy := range []keyed.Policy{keyed.RefuseNew, keyed.EvictLRU} {
		t.Run(policy.String(), func(t *testing.T) {
			const capacity, bound, keys, g = 3, 64, 256, 8
			l, err := keyed.New(capacity, 1e-3, keyed.WithMaxKeys(bound), keyed.WithShards(4), keyed.WithPolicy(policy))
			require.NoError(t, err)
			admitted := make([]int64, keys)
			var maxLen atomic.Int64
			done := make(chan []int64, g)
			for i := range g {
				go func() {
					mine := make([]int64, keys)
					for r := range 2000 {
						k := (r*31 + i*17) % keys
						if l.Allow(fmt.Sprint("c", k)) {
							mine[k]++
						}
						for n, m := int64(l.Len()), maxLen.Load(); n > m && !maxLen.CompareAndSwap(m, n); m = maxLen.Load() {
						}
					}
					done <- mine
				}()
			}
			var total int64
			for range g {
				for k, n := range <-done {
					admitted[k] += n
					total += n
				}
			}
			st := l.Stats()
			assert.LessOrEqual(t, maxLen.Load(), int64(bound), "the most keys any goroutine saw held")
			assert.LessOrEqual(t, total, capacity*int64(st.Inserts), "no bucket admitted beyond its capacity")
			assert.Equal(t, st.Inserts, uint64(st.Keys)+st.Drops+st.Evictions, "every bucket created is held, dropped or evicted")
			if policy == keyed.RefuseNew {
				for k, n := range admitted {
					assert.LessOrEqual(t, n, int64(capacity), "key c%d: never beyond its capacity", k)
				}
				assert.Zero(t, st.Evictions)
				assert.Positive(t, st.Refusals, "the bound was reached")
			} else {
				assert.Positive(t, st.Evictions, "the bound was reached")
				assert.Zero(t, st.Refusals)
			}
		})
	}
}
