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

// TestWideRequestsBounded: a client whose every request carries
// rls.MaxLimited distinct, never-full descriptors (values it chooses),
// against stores of small bounds, the clock frozen. The documented bound is
// maxKeys × BucketBytes + FixedBytes whatever the client sends.
func TestWideRequestsBounded(t *testing.T) {
	for _, maxKeys := range []int{1, 64, 256, 4096} {
		t.Run(fmt.Sprint("maxKeys=", maxKeys), func(t *testing.T) {
			clk := buckettest.NewFakeClock(0)
			hits := make([]rls.Hit, rls.MaxLimited)
			res := make([]rls.Result, rls.MaxLimited)
			before := heapAfterGC()
			s := memstore.New(memstore.WithClock(clk), memstore.WithMaxKeys(maxKeys))
			const requests = 300
			for r := range requests {
				for i := range hits {
					hits[i] = rls.Hit{Key: fmt.Sprintf("d_%d_%d", r, i), Capacity: 1000, Count: 1, Period: time.Hour, N: 1}
				}
				ok, err := s.Decide(ctx, hits, res)
				require.NoError(t, err)
				require.True(t, ok)
			}
			clear(hits) // the test's own key strings are not the store's
			grown := int64(heapAfterGC()) - int64(before)
			bound := int64(maxKeys*memstore.BucketBytes + memstore.FixedBytes)
			t.Logf("maxKeys %d: %d held, %d bytes; documented bound %d (%.2fx)", maxKeys, s.Len(), grown, bound, float64(grown)/float64(bound))
			require.LessOrEqual(t, grown, bound)
			runtime.KeepAlive(s)
			runtime.KeepAlive(hits)
			runtime.KeepAlive(res)
		})
	}
}

// TestFilledToBound: a client that brings maxKeys distinct never-full
// descriptor values, one a request, fills a store to its bound; the live
// heap must stay within maxKeys × BucketBytes + FixedBytes. The tables'
// arrays are rounded up by the allocator (a size class, or whole 8 KiB
// pages past 32 KiB), which the bound must count.
func TestFilledToBound(t *testing.T) {
	for _, maxKeys := range []int{16384, 65536, 209728} {
		t.Run(fmt.Sprint("maxKeys=", maxKeys), func(t *testing.T) {
			clk := buckettest.NewFakeClock(0)
			hit := []rls.Hit{{Capacity: 1000, Count: 1, Period: time.Hour, N: 1}}
			res := make([]rls.Result, 1)
			before := heapAfterGC()
			s := memstore.New(memstore.WithClock(clk), memstore.WithMaxKeys(maxKeys))
			key := make([]byte, 0, 16)
			for i := range maxKeys {
				key = fmt.Appendf(key[:0], "v%d", i)
				hit[0].Key = string(key)
				ok, err := s.Decide(ctx, hit, res)
				require.NoError(t, err)
				require.True(t, ok)
			}
			hit[0].Key = ""
			grown := int64(heapAfterGC()) - int64(before)
			bound := int64(maxKeys*memstore.BucketBytes + memstore.FixedBytes)
			t.Logf("maxKeys %d: %d held, %d bytes; documented bound %d (over by %d)", maxKeys, s.Len(), grown, bound, grown-bound)
			require.LessOrEqual(t, grown, bound)
			runtime.KeepAlive(s)
		})
	}
}
