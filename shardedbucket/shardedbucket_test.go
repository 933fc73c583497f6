package shardedbucket_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/shardedbucket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	buckettest.Run(t, shardedbucket.New)
}

// TestConformanceManyShards runs the suite again with 16 shards (fewer where
// the capacity is smaller), so that every case also crosses shards: gathers,
// put-backs and reservations spread over several of them.
func TestConformanceManyShards(t *testing.T) {
	buckettest.Run(t, func(capacity int64, rate float64, opts ...admit.Option) (*shardedbucket.Bucket, error) {
		n := 16
		for n > 1 && int64(n) > capacity {
			n >>= 1
		}
		return shardedbucket.New(capacity, rate, append(opts, shardedbucket.WithShards(n))...)
	})
}
