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
