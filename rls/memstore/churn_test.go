package memstore_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
	"github.com/stretchr/testify/require"
)

// TestChurnBounded: a client that keeps bringing new keys (random
// descriptor values) never grows the store past its documented bound,
// however many keys come and go: 16 times the bound in new keys, with the
// clock frozen (every new key at a full shard evicts a live bucket) and
// with the clock running (buckets full again are dropped), the live heap
// stays within maxKeys × BucketBytes + FixedBytes. (The Go maps it used
// before never shrank and grew with the tombstones removals left: 166 to
// 169 bytes a bucket after 16 times the bound, past even the 128 they were
// documented at; 280 after 100 times.)
func TestChurnBounded(t *testing.T) {
	const maxKeys, churn = 4096, 16 * 4096
	for _, step := range []time.Duration{0, time.Millisecond} {
		t.Run(fmt.Sprint("step=", step), func(t *testing.T) {
			clk := buckettest.NewFakeClock(0)
			before := heapAfterGC()
			s := memstore.New(memstore.WithClock(clk), memstore.WithMaxKeys(maxKeys))
			res := make([]rls.Result, 1)
			key := make([]byte, 0, 16)
			for i := range churn {
				clk.Advance(step)
				key = fmt.Appendf(key[:0], "k%d", i)
				_, err := s.Decide(ctx, []rls.Hit{{Key: string(key), Capacity: 1, Count: 1, Period: time.Second, N: 1}}, res)
				require.NoError(t, err)
			}
			require.LessOrEqual(t, s.Len(), maxKeys)
			grown := int64(heapAfterGC()) - int64(before)
			t.Logf("%d keys through a store of %d: %d bytes (%d a bucket of the bound), %d held, %d evicted",
				churn, maxKeys, grown, grown/maxKeys, s.Len(), s.Evictions())
			require.LessOrEqual(t, grown, int64(maxKeys*memstore.BucketBytes+memstore.FixedBytes))
			runtime.KeepAlive(s)
		})
	}
}
