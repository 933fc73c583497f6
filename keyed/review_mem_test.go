package keyed_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit/keyed"
)

// TestReviewHugeKeysNotRetained: keys as a client sends them through
// admithttp.KeyByHeader or admitgrpc.KeyByMetadata (the header value as
// it is): 1024 distinct keys of 64 KiB each, and 1024 keys of 64 bytes
// each the tail of its own 64 KiB buffer. The limiter must keep neither
// buffer: the heap stays within MaxBytesPerKey·n + MaxBytesPerShard·shards.
func TestReviewHugeKeysNotRetained(t *testing.T) {
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
