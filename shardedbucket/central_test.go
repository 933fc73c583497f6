package shardedbucket

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// words returns every word a call could write: each shard's z, then c,
// debtUntil and epoch.
func words(b *Bucket) []int64 {
	var w []int64
	for i := range b.shards {
		w = append(w, b.shards[i].z.Load())
	}
	return append(w, b.c.Load(), b.debtUntil.Load(), b.epoch.Load())
}

// changed returns the indexes (as in words) of the words that differ.
func changed(before, after []int64) []int {
	var idx []int
	for i := range before {
		if before[i] != after[i] {
			idx = append(idx, i)
		}
	}
	return idx
}

// TestCollapseAndSpread walks a bucket of 4 shards through its two
// representations on a fake clock: the first gather to find it dry
// collapses it into the central word; while it is central, a rejection
// writes no word at all and an admission writes c alone (the dry path's one
// shared line); the refill that leaves spreadAt after an admission deals the
// balance back to the shards, exactly; and every step keeps the balance.
func TestCollapseAndSpread(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(64, 1e3, WithShards(4), admit.WithClock(clk))
	require.NoError(t, err)
	require.Equal(t, int64(spread), b.c.Load(), "a new bucket is spread")
	require.Equal(t, b.p.Units(32), b.spreadAt, "half the capacity (below 16 tokens a shard)")
	require.True(t, b.TryAcquireN(64))
	clk.Advance(500 * time.Microsecond) // half a token, in one shard
	assert.False(t, b.TryAcquire(), "half a token")
	require.NotEqual(t, int64(spread), b.c.Load(), "the dry gather collapsed the bucket")
	for i := range b.shards {
		require.Equal(t, int64(frozen), b.shards[i].z.Load(), "shard %d frozen", i)
	}
	assert.InDelta(t, 0.5, b.Tokens(), 1e-9, "the collapse kept the half token")

	cIdx := len(b.shards)
	for k := range 200 {
		clk.Advance(100 * time.Microsecond) // a tenth of a token
		before := words(b)
		ok := b.takeAt(b.p.Units(1), b.p.V(clk.Now()), uint(k))
		after := words(b)
		if ok {
			assert.Equal(t, []int{cIdx}, changed(before, after), "step %d: an admission writes c alone", k)
		} else {
			assert.Empty(t, changed(before, after), "step %d: a rejection writes nothing", k)
		}
	}
	assert.InDelta(t, 0.5, b.Tokens(), 1e-9, "twenty tokens admitted, one every ten steps")

	// 40 ms: 40 tokens more. The admission leaves 39.5 >= 32: it spreads.
	clk.Advance(40 * time.Millisecond)
	require.True(t, b.TryAcquire())
	require.Equal(t, int64(spread), b.c.Load(), "spread again")
	v := b.p.V(clk.Now())
	var sum int64
	for i := range b.shards {
		bal, _, _ := b.shards[i].state(v, &b.g)
		require.GreaterOrEqual(t, bal, int64(0), "shard %d", i)
		require.LessOrEqual(t, bal, b.shards[i].cap, "shard %d", i)
		sum += bal
	}
	assert.Equal(t, b.p.Units(79)/2, sum, "39.5 tokens dealt, none lost")
	assert.True(t, b.TryAcquireN(39))
	assert.False(t, b.TryAcquire(), "half a token left")
	clk.Advance(time.Second)
	assert.Equal(t, 64.0, b.Tokens(), "full after a second")
}

// TestSpreadThreshold checks the hysteresis: at least two tokens (or the
// whole capacity) and at most half the capacity, 16 tokens a shard between.
func TestSpreadThreshold(t *testing.T) {
	const one = 1 << 10
	for _, tc := range []struct {
		capacity int64
		shards   int
		want     int64
	}{{2, 2, 2}, {3, 2, 2}, {4, 4, 2}, {100, 2, 32}, {100, 8, 50}, {1e6, 16, 256}, {1, 1, 1}, {1e6, 1, 16}} {
		assert.Equal(t, tc.want*one, spreadThreshold(tc.capacity*one, one, tc.shards), "%+v", tc)
	}
}

// TestCollapseAtTheLatestReading stages, inside a collapse, a concurrent
// caller whose clock reading is later than the collapsing caller's: after
// the collapse has frozen shard 0, it takes shard 1's 4 tokens at 100 s.
// The collapse must sum the shards at a reading taken after the last
// freeze: summed at the collapsing caller's own reading (0.5 s), shard 1's
// take at 100 s would count as refill spent in advance, and the central
// word would hand out the 4 tokens shard 0 holds and 4 more: 12 tokens at
// 100 s from a bucket of capacity 8.
func TestCollapseAtTheLatestReading(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(8, 1, WithShards(2), admit.WithClock(clk))
	require.NoError(t, err)
	adm := []buckettest.Admission{{At: 0, N: 8}}
	require.True(t, b.TryAcquireN(8))
	clk.Advance(500 * time.Millisecond)
	testHookStep = func(b *Bucket, i int) {
		if i != 0 || b.c.Load() != spread {
			return
		}
		testHookStep = nil
		clk.Set(int64(100 * time.Second))
		require.True(t, b.takeAt(b.p.Units(4), b.p.V(clk.Now()), 1), "shard 1 is full at 100 s")
		adm = append(adm, buckettest.Admission{At: clk.Now(), N: 4})
	}
	defer func() { testHookStep = nil }()
	assert.False(t, b.takeAt(b.p.Units(1), b.p.V(int64(500*time.Millisecond)), 0), "half a token at 0.5 s")
	require.Nil(t, testHookStep, "the collapse ran the staged take")
	require.NotEqual(t, int64(spread), b.c.Load())
	got := int64(0)
	for b.TryAcquire() {
		adm = append(adm, buckettest.Admission{At: clk.Now(), N: 1})
		got++
	}
	assert.NoError(t, buckettest.CheckAdmissions(8, 1, adm))
	assert.Equal(t, int64(4), got, "shard 0's 4 tokens, after shard 1's")
}

// TestReserveCollapses checks that a blocked AcquireN reserves on the
// central word: the bucket collapses, the waiter wakes exactly when one
// bucket's would, no TryAcquire overtakes it, and cancelling it gives the
// units back while it is the newest.
func TestReserveCollapses(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(16, 4, WithShards(4), admit.WithClock(clk))
	require.NoError(t, err)
	require.True(t, b.TryAcquireN(12)) // 4 tokens left, spread over the shards
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.AcquireN(ctx, 6) }() // 2 short: 0.5 s at 4/s
	require.NoError(t, clk.WaitForSleepers(context.Background(), 1))
	require.NotEqual(t, int64(spread), b.c.Load(), "the reservation collapsed the bucket")
	wake, ok := clk.NextWake()
	require.True(t, ok)
	assert.Equal(t, int64(500*time.Millisecond), wake, "the waiter wakes when one bucket's would")
	assert.InDelta(t, -2.0, b.Tokens(), 1e-9)
	clk.Advance(499 * time.Millisecond)
	assert.False(t, b.TryAcquire(), "no TryAcquire overtakes the waiter")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	assert.InDelta(t, 4+0.499*4, b.Tokens(), 1e-9, "the newest reservation's units came back")
	assert.True(t, b.TryAcquireN(5))
}
