package memstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
)

// BenchmarkDecide: one request's Decide on a fake clock that stands
// still. case=held: keys whose buckets the store holds (refilled one
// token an hour, so never full, with a burst the run cannot drain);
// case=new: a new key every request at a full store (each one scans a
// shard and evicts); hits is the request's number of descriptors.
func BenchmarkDecide(b *testing.B) {
	const held = 1 << 14
	for _, c := range []string{"held", "new"} {
		for _, n := range []int{1, 4} {
			b.Run(fmt.Sprintf("case=%s/hits=%d", c, n), func(b *testing.B) {
				s := memstore.New(memstore.WithClock(buckettest.NewFakeClock(0)), memstore.WithMaxKeys(held))
				keys := make([]string, held)
				res := make([]rls.Result, n)
				hits := make([]rls.Hit, n)
				for i := range keys {
					keys[i] = fmt.Sprint("domain:user:", i)
					hits[0] = rls.Hit{Key: keys[i], Capacity: 1 << 31, Count: 1, Period: time.Hour, N: 1}
					if _, err := s.Decide(ctx, hits[:1], res); err != nil {
						b.Fatal(err)
					}
				}
				var fresh []string
				if c == "new" {
					fresh = make([]string, b.N*n)
					for i := range fresh {
						fresh[i] = fmt.Sprint("domain:new:", i)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					for j := range hits {
						k := keys[(i*n+j*4099)%held]
						if c == "new" {
							k = fresh[i*n+j]
						}
						hits[j] = rls.Hit{Key: k, Capacity: 1 << 31, Count: 1, Period: time.Hour, N: 1}
					}
					if _, err := s.Decide(ctx, hits, res); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
