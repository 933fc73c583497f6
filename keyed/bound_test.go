package keyed_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
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
)

// fakeStart is where the tests' clocks start: far from 0, so that a
// stale reading can lie before a key's first.
const fakeStart = int64(1) << 40

func newFake(t *testing.T, capacity int64, rate float64, opts ...admit.Option) (*keyed.Limiter, *buckettest.FakeClock) {
	t.Helper()
	clk := buckettest.NewFakeClock(fakeStart)
	return newOn(t, clk, capacity, rate, opts...), clk
}

// newOn returns a limiter of capacity and rate on clk.
func newOn(t *testing.T, clk admit.Clock, capacity int64, rate float64, opts ...admit.Option) *keyed.Limiter {
	t.Helper()
	l, err := keyed.New(capacity, rate, append([]admit.Option{admit.WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	return l
}

// heapNow returns the live heap after a collection.
func heapNow() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
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
	}
	assert.Equal(t, "EvictLRU", keyed.EvictLRU.String())
	assert.Equal(t, "RefuseNew", keyed.RefuseNew.String())
	assert.Equal(t, "Policy(9)", keyed.Policy(9).String())
}

// TestDropFull: below the bound, each insertion lets the hand look at two
// slots of its shard and drop the full buckets there, so full keys leave
// without a goroutine; a peek at an absent key stores nothing; a full
// bucket is dropped exactly (the key then decides as a new one).
func TestDropFull(t *testing.T) {
	l, clk := newFake(t, 2, 1, keyed.WithShards(1))
	for i := range 8 {
		require.True(t, l.Allow(fmt.Sprint("k", i)))
	}
	assert.Equal(t, 8, l.Len())
	clk.Advance(time.Second) // every bucket is full again
	for i := range 8 {
		require.True(t, l.Allow(fmt.Sprint("n", i)))
	}
	st := l.Stats()
	assert.Equal(t, uint64(16), st.Inserts)
	assert.Positive(t, st.Drops, "the hand dropped full buckets")
	assert.Equal(t, 16-int(st.Drops), l.Len())
	for range 3 {
		d, err := l.AllowN(context.Background(), "absent", 0)
		require.NoError(t, err)
		assert.Equal(t, int64(2), d.Remaining)
	}
	assert.False(t, l.Held("absent"), "a peek at an absent key stores nothing")
	for i := range 8 {
		d, err := l.AllowN(context.Background(), fmt.Sprint("k", i), 2)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "k%d: full, held or not", i)
	}
}

// TestEvict: at the bound with no full bucket, a new key evicts a live key
// chosen by the CLOCK hand (one whose reference bit the hand cleared on an
// earlier turn, i.e. not used since); the evicted client restarts full;
// Stats counts it.
func TestEvict(t *testing.T) {
	l, _ := newFake(t, 3, 1e-3, keyed.WithMaxKeys(3), keyed.WithShards(1))
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, l.Allow(k))
	}
	require.True(t, l.Allow("d"))
	st := l.Stats()
	assert.Equal(t, uint64(1), st.Evictions)
	assert.Equal(t, 3, st.Keys)
	held := 0
	var gone string
	for _, k := range []string{"a", "b", "c"} {
		if l.Held(k) {
			held++
		} else {
			gone = k
		}
	}
	assert.Equal(t, 2, held)
	assert.True(t, l.Held("d"))
	// The hand cleared every other key's bit on its way: a key used since
	// has its second chance, so the next eviction takes one that was not.
	for _, k := range []string{"a", "b", "c", "d"} {
		if k != gone && k != "d" {
			require.True(t, l.Allow(k))
		}
	}
	d, err := l.AllowN(context.Background(), gone, 3)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "an evicted client restarts full")
	assert.False(t, l.Held("d"), "d, the only key not used since the hand passed, is evicted")
	assert.Equal(t, uint64(2), l.Stats().Evictions)
}

// TestRefuseNew: at the bound with no full bucket, a new key is refused
// with an error wrapping ErrUnavailable and a RetryAfter until the first
// held bucket is full; held keys are untouched, and once that bucket is
// full the new key gets its place.
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
	assert.Equal(t, time.Second, d.RetryAfter, "b is full 1 s after it was taken from (a only 1.5 s)")
	assert.False(t, l.Allow("c"))
	d, err = l.AllowN(context.Background(), "c", 0)
	require.NoError(t, err, "a peek needs no room")
	assert.Equal(t, int64(2), d.Remaining)
	st := l.Stats()
	assert.Equal(t, uint64(2), st.Refusals)
	assert.Zero(t, st.Evictions)
	assert.True(t, l.Held("a") && l.Held("b"))
	clk.Advance(time.Second - 1)
	_, err = l.AllowN(context.Background(), "c", 1)
	require.ErrorIs(t, err, admit.ErrUnavailable, "a nanosecond early")
	clk.Advance(1)
	d, err = l.AllowN(context.Background(), "c", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "b full, dropped; c takes its place")
	assert.False(t, l.Held("b"))
	assert.True(t, l.Held("a"), "a is live")
	assert.Equal(t, uint64(1), l.Stats().Drops)
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
// under either policy; every key inserted is held, dropped or evicted; and
// once the spray's buckets have refilled, as many new keys as the bound are
// served by dropping them, without one eviction or refusal more.
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
			if policy == keyed.EvictLRU {
				assert.Positive(t, st.Evictions)
				assert.Zero(t, st.Refusals)
			} else {
				assert.Positive(t, st.Refusals)
				assert.Zero(t, st.Evictions)
			}
			assert.Equal(t, st.Inserts, uint64(st.Keys)+st.Drops+st.Evictions, "every key inserted is held, dropped or evicted")
			clk.Advance(10 * time.Second) // every bucket refills
			for i := range bound {
				require.True(t, l.Allow(fmt.Sprint("later-", i)), "later key %d", i)
			}
			after := l.Stats()
			assert.Equal(t, st.Evictions, after.Evictions, "full buckets made the room")
			assert.Equal(t, st.Refusals, after.Refusals, "full buckets made the room")
			assert.LessOrEqual(t, l.Len(), bound)
		})
	}
}

// TestFindingFullBeforeLive is the first finding of the second design: a
// bound of 1000, 50 drained (live) clients that then stay away, and rounds
// of 500 new keys, 10 s apart, that each take one token and are full again
// 10 s later. At every round the table holds full buckets, which are exact
// to drop, so no live client may be evicted (or new key refused): the
// first design looked only at its LRU end, where the drained clients
// blocked the drop, and evicted them.
func TestFindingFullBeforeLive(t *testing.T) {
	for _, policy := range []keyed.Policy{keyed.EvictLRU, keyed.RefuseNew} {
		t.Run(policy.String(), func(t *testing.T) {
			l, clk := newFake(t, 10, 0.1, keyed.WithMaxKeys(1000), keyed.WithPolicy(policy))
			ctx := context.Background()
			for i := range 50 {
				d, err := l.AllowN(ctx, fmt.Sprint("live-", i), 10)
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			const rounds = 6
			for round := range rounds {
				for i := range 500 {
					d, err := l.AllowN(ctx, fmt.Sprint("spray-", round, "-", i), 1)
					require.NoError(t, err, "round %d key %d: a new key refused while full buckets are held", round, i)
					require.True(t, d.Allowed)
				}
				clk.Advance(10 * time.Second) // this round's keys are full again
			}
			for i := range 50 {
				k := fmt.Sprint("live-", i)
				require.True(t, l.Held(k), "live client %s was forgotten", k)
				d, err := l.AllowN(ctx, k, 0)
				require.NoError(t, err)
				require.Equal(t, int64(rounds), d.Remaining, "%s kept its balance (a restarted bucket holds 10)", k)
			}
			st := l.Stats()
			assert.Zero(t, st.Evictions)
			assert.Zero(t, st.Refusals)
			assert.Positive(t, st.Drops)
		})
	}
}

// TestFindingBoundReached is the second finding: with the default sharding
// the first design split WithMaxKeys into per-shard shares and began to
// evict or refuse when the limiter held 67–77% of the bound. Eviction and
// refusal must start at 90% or more of it (here: exactly at it).
func TestFindingBoundReached(t *testing.T) {
	for _, policy := range []keyed.Policy{keyed.EvictLRU, keyed.RefuseNew} {
		t.Run(policy.String(), func(t *testing.T) {
			const bound = 16384
			l, _ := newFake(t, 1, 1e-6, keyed.WithMaxKeys(bound), keyed.WithPolicy(policy))
			for i := 0; ; i++ {
				before := l.Len()
				_, err := l.AllowN(context.Background(), fmt.Sprint("key-", i), 1)
				st := l.Stats()
				if st.Evictions+st.Refusals > 0 {
					assert.GreaterOrEqual(t, before, bound*9/10, "the first eviction or refusal came at %d keys of %d", before, bound)
					assert.Equal(t, bound, before, "the bound is reached exactly")
					if policy == keyed.RefuseNew {
						require.ErrorIs(t, err, admit.ErrUnavailable)
					}
					return
				}
				require.NoError(t, err)
				require.LessOrEqual(t, i, bound, "no eviction or refusal past the bound")
			}
		})
	}
}

// TestFindingRefusedFindsRoom is the third finding: under RefuseNew a
// refused key's RetryAfter is the wait for room. Peeks and denied calls on
// the bucket that fills first do not change when it is full, so the key
// that waits exactly RetryAfter finds room. The first design moved such a
// key off its LRU end and refused the new key again.
func TestFindingRefusedFindsRoom(t *testing.T) {
	l, clk := newFake(t, 4, 1, keyed.WithMaxKeys(3), keyed.WithShards(1), keyed.WithPolicy(keyed.RefuseNew))
	ctx := context.Background()
	// a is drained by four calls, so that the time it is full moves after
	// its insertion.
	for range 4 {
		require.True(t, l.Allow("a"))
	}
	clk.Advance(100 * time.Millisecond)
	for i, k := range []string{"b", "c"} {
		d, err := l.AllowN(ctx, k, 4)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		clk.Advance(time.Duration(i+2) * 100 * time.Millisecond)
	}
	d, err := l.AllowN(ctx, "new", 1)
	require.ErrorIs(t, err, admit.ErrUnavailable)
	wait := d.RetryAfter
	require.Equal(t, 4*time.Second-600*time.Millisecond, wait, "a, drained first, is full 4 s after")
	// Peeks and denied calls on a, the key whose bucket fills first.
	for range 3 {
		clk.Advance(wait / 4)
		_, err := l.AllowN(ctx, "a", 0)
		require.NoError(t, err)
		d, err := l.AllowN(ctx, "a", 4)
		require.NoError(t, err)
		require.False(t, d.Allowed)
	}
	clk.Advance(wait - 3*(wait/4))
	d, err = l.AllowN(ctx, "new", 1)
	require.NoError(t, err, "the refused key waited its RetryAfter")
	assert.True(t, d.Allowed)
	assert.False(t, l.Held("a"), "a, full, made the room")
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

// TestStorm: goroutines on the real clock over four times more keys than
// the bound, with buckets that refill within milliseconds, so keys churn
// through the table (inserted, dropped when full, evicted or refused at the
// bound) while others are decided on without a lock, at GOMAXPROCS 1, 2, 4
// and 8 (make test runs it under -race). It checks, whenever a goroutine looks, that the bound
// holds; at the end, that every bucket created is held, dropped or evicted;
// and per key, that what was admitted is at most capacity + rate × elapsed
// + 1, plus a capacity per eviction of that key (an evicted client restarts
// full; under RefuseNew there are none).
func TestStorm(t *testing.T) {
	eachProcs(t, storm)
}

func storm(t *testing.T) {
	for _, policy := range []keyed.Policy{keyed.RefuseNew, keyed.EvictLRU} {
		t.Run(policy.String(), func(t *testing.T) {
			const capacity, rate, bound, keys = 2, 1000.0, 64, 256
			g := 4 * runtime.GOMAXPROCS(0)
			l, err := keyed.New(capacity, rate, keyed.WithMaxKeys(bound), keyed.WithShards(4), keyed.WithPolicy(policy))
			require.NoError(t, err)
			var maxLen atomic.Int64
			var stop, paused atomic.Bool
			admitted := make([]atomic.Int64, keys)
			var wg sync.WaitGroup
			begin := time.Now()
			for i := range g {
				wg.Go(func() {
					ctx := context.Background()
					for r := 0; !stop.Load(); r++ {
						for paused.Load() && !stop.Load() {
							time.Sleep(100 * time.Microsecond)
						}
						k := (r*31 + i*17) % keys
						d, err := l.AllowN(ctx, fmt.Sprint("c", k), 1)
						if err != nil && policy == keyed.EvictLRU {
							t.Errorf("EvictLRU: %v", err)
							return
						}
						if d.Allowed {
							admitted[k].Add(1)
						}
						if r%64 == 0 {
							for n, m := int64(l.Len()), maxLen.Load(); n > m && !maxLen.CompareAndSwap(m, n); m = maxLen.Load() {
							}
						}
					}
				})
			}
			// How long to storm, not an assertion. The goroutines revisit
			// every held key within microseconds, so none is ever full
			// (capacity/rate = 2 ms) unless they all stand still: pause
			// them for 3 ms every 20 ms, so that the held buckets fill and
			// the insertions after each pause must drop them (a full
			// bucket goes before any live key). Without the pauses the
			// drops came only from scheduling stalls, and a faster hot path
			// saw none.
			for range 10 {
				time.Sleep(17 * time.Millisecond)
				paused.Store(true)
				time.Sleep(3 * time.Millisecond)
				paused.Store(false)
			}
			stop.Store(true)
			wg.Wait()
			elapsed := time.Since(begin)
			st := l.Stats()
			assert.LessOrEqual(t, maxLen.Load(), int64(bound), "the most keys any goroutine saw held")
			assert.Equal(t, st.Inserts, uint64(st.Keys)+st.Drops+st.Evictions, "every bucket created is held, dropped or evicted")
			assert.Positive(t, st.Drops, "keys churned")
			limit := capacity + int64(rate*elapsed.Seconds()) + 1
			var total, sum int64
			for k := range admitted {
				n := admitted[k].Load()
				total += n
				if policy == keyed.RefuseNew {
					assert.LessOrEqual(t, n, limit, "key c%d", k)
				}
			}
			sum = int64(keys)*limit + capacity*int64(st.Evictions)
			assert.LessOrEqual(t, total, sum, "all keys together")
			if policy == keyed.RefuseNew {
				assert.Zero(t, st.Evictions)
			} else {
				assert.Zero(t, st.Refusals)
			}
		})
	}
}

// eachProcs runs f as subtests at GOMAXPROCS 1, 2, 4 and 8, the -cpu list
// of the storms, restoring the setting after.
func eachProcs(t *testing.T, f func(t *testing.T)) {
	for _, procs := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprint("procs=", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			f(t)
		})
	}
}

// TestMultiKeyForgottenNamesFreed: a key's Names move from the entry's
// inline array to a heap array at the fourth; the inline array must not
// keep the first three's parameters and Names alive once they are dropped
// (full again, to make room for new Names at MaxNames), or a key holds
// MaxNames Names and three forgotten ones, past its bytes bound (16,498
// bytes a key against 15,856 before the array was cleared).
func TestMultiKeyForgottenNamesFreed(t *testing.T) {
	ctx := context.Background()
	const keys = 256
	l, clk := newFake(t, 1, 1, keyed.WithMaxKeys(keys))
	lim := func(k, i int) admit.Limit {
		rate := 1e-6 // never full again
		if i < 3 {
			rate = 1e9 // full 1 ns after its admission
		}
		return admit.Limit{Name: fmt.Sprintf("%0128d", k*1000+i), Capacity: int64(1000 + i), Rate: rate}
	}
	before := heapNow()
	for k := range keys {
		key := fmt.Sprintf("%064d", k)
		for i := range keyed.MaxNames {
			d, err := l.AllowLimits(ctx, key, 1, lim(k, i))
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
	}
	clk.Advance(time.Second) // Names 0 to 2 of every key are full again
	for k := range keys {
		key := fmt.Sprintf("%064d", k)
		for i := keyed.MaxNames; i < keyed.MaxNames+3; i++ {
			d, err := l.AllowLimits(ctx, key, 1, lim(k, i))
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		names := l.Names(key)
		require.Len(t, names, keyed.MaxNames)
		require.NotContains(t, names, lim(k, 0).Name)
	}
	grown := heapNow() - before
	bound := int64(keys*(keyed.MaxBytesPerMultiKey+keyed.MaxBytesPerKey) + keyed.MaxBytesParamsCache)
	require.LessOrEqual(t, grown, bound, "%d bytes a key", grown/keys)
	runtime.KeepAlive(l)
}

// TestHugeKeysNotRetained: keys as a client sends them through
// admithttp.KeyByHeader or admitgrpc.KeyByMetadata (the header value as
// it is): 1024 distinct keys of 64 KiB each, and 1024 keys of 64 bytes
// each the tail of its own 64 KiB buffer. The limiter must keep neither
// buffer: the heap stays within MaxBytesPerKey·n + MaxBytesPerShard·shards.
func TestHugeKeysNotRetained(t *testing.T) {
	const n = 2048
	const self = 8 << 10
	before := heapNow()
	l, _ := newFake(t, 10, 1, keyed.WithMaxKeys(n))
	shards := l.Stats().Shards
	for i := range n / 2 {
		k := fmt.Sprintf("%d-", i) + strings.Repeat("x", 64<<10)
		require.True(t, l.Allow(k))
		buf := strings.Repeat("y", 64<<10) + fmt.Sprintf("%064d", i)
		require.True(t, l.Allow(buf[len(buf)-64:]))
	}
	grown := heapNow() - before
	bound := int64(n*keyed.MaxBytesPerKey + shards*keyed.MaxBytesPerShard + self)
	t.Logf("%d keys (half 64 KiB, half 64-byte tails of 64 KiB buffers): %d bytes, bound %d", l.Len(), grown, bound)
	require.LessOrEqual(t, grown, bound)
	runtime.KeepAlive(l)
}

// TestCarryOverBytes: keys that each hold keyed.MaxNames Names of 128
// bytes, every one then carried over to another Capacity (a tier change),
// still cost at most keyed.MaxBytesPerMultiKey each: a carry-over must not
// leave a key holding the old limit's copy of the Name beside the new one's
// (before the fix: 24685 bytes a key).
func TestCarryOverBytes(t *testing.T) {
	ctx := context.Background()
	const keys = 16
	l, _ := newFake(t, 1, 1, keyed.WithMaxKeys(keys))
	before := heapNow()
	for k := range keys {
		key := fmt.Sprintf("%064d", k)
		for round := range 2 {
			for i := range keyed.MaxNames {
				lim := admit.Limit{Name: fmt.Sprintf("%0128d", k*keyed.MaxNames+i), Capacity: int64(1000 + 1000*round + i), Rate: float64(1 + k)}
				d, err := l.AllowLimits(ctx, key, 1, lim)
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
		}
		require.Len(t, l.Names(key), keyed.MaxNames)
	}
	grown := heapNow() - before
	t.Logf("%d bytes per key holding %d carried-over Names of 128 bytes (bound %d)", grown/keys, keyed.MaxNames, keyed.MaxBytesPerMultiKey)
	// The limiter's cache of limits may hold 256 of the first round's
	// limits besides (MaxBytesParamsCache), which no key holds any more.
	assert.LessOrEqual(t, grown, int64(keys*(keyed.MaxBytesPerMultiKey+keyed.MaxBytesPerKey)+keyed.MaxBytesParamsCache))
	runtime.KeepAlive(l)
}

// TestDropOnlyFull: a bucket short of full by the refill of a nanosecond
// (one unit at 1 token/s) is not full, and the hand that drops full
// buckets must keep it: dropped, its client would come back to a full
// bucket and gain that unit.
func TestDropOnlyFull(t *testing.T) {
	l, clk := newFake(t, 2, 1, keyed.WithShards(1))
	for i := range 8 {
		require.True(t, l.Allow(fmt.Sprint("k", i)))
	}
	clk.Advance(time.Second - time.Nanosecond) // every bucket a unit short of full
	for i := range 8 {
		require.True(t, l.Allow(fmt.Sprint("n", i)))
	}
	st := l.Stats()
	assert.Equal(t, uint64(16), st.Inserts)
	assert.Zero(t, st.Drops, "the hand dropped a bucket short of full")
	assert.Equal(t, 16, l.Len())
}
