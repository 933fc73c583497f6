package keyed_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
)

// TestReviewCarryOverBytes: keys that each hold keyed.MaxNames Names of 128
// bytes, every one then carried over to another Capacity (a tier change),
// still cost at most keyed.MaxBytesPerMultiKey each: a carry-over must not
// leave a key holding the old limit's copy of the Name beside the new one's
// (before the fix: 24685 bytes a key).
func TestReviewCarryOverBytes(t *testing.T) {
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

// TestReviewBackwardDrop: on a clock that runs backwards (which admit.Clock
// asks not to), a full bucket's drop is not exact: the sweep decides
// "full" at the time the inserting call applies (its shard's absentAt, a
// later time a peek at another key applied), not at the key's own latest
// time, and the key then restarts at that later time: its client, never
// evicted, gets up to one more burst at a reading no later than the one
// that drained it. The documented backward-clock exceptions (a conversion,
// an eviction: TestBackwardClockConversion) now name the drop too; this
// pins the gain at one burst.
func TestReviewBackwardDrop(t *testing.T) {
	ctx := context.Background()
	l, clk := newFake(t, 3, 1, keyed.WithMaxKeys(2), keyed.WithShards(1))
	t0 := clk.Now()
	d, err := l.AllowN(ctx, "a", 3) // a drained at t0
	require.NoError(t, err)
	require.True(t, d.Allowed)
	clk.Set(t0 + 100e9)
	_, err = l.AllowN(ctx, "p", 0) // a peek at a key not held: the shard has applied t0+100s
	require.NoError(t, err)
	clk.Set(t0) // the clock runs back
	for _, k := range []string{"b", "c"} {
		d, err = l.AllowN(ctx, k, 1) // b and c start at t0+100s; c's insertion drops a, full then
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	require.False(t, l.Held("a"))
	require.EqualValues(t, 0, l.Stats().Evictions)
	got := int64(0)
	for range 4 {
		if d, err = l.AllowN(ctx, "a", 1); err == nil && d.Allowed {
			got++
		}
	}
	// a's own readings never passed t0, where it was drained: a lock-held
	// mutexbucket would admit nothing; the drop gives one burst, no more.
	assert.EqualValues(t, 3, got, "a admitted %d more at reading t0", got)
	assert.EqualValues(t, 1, l.Stats().Evictions) // b or c, never a
}
