package shardedbucket_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// TestWalk is the model-based walk on a clock that never steps back (rule
// 5's exception): with the default shards (2 on two Ps), exact from the
// first reservation until an admission may spread the bucket, the bound and
// the documented promises elsewhere; with one shard, exact throughout; with
// 16 (fewer where the capacity is smaller), gathers across many shards.
func TestWalk(t *testing.T) {
	t.Run("default", func(t *testing.T) { buckettest.Walk(t, shardedbucket.New, 300) })
	for _, n := range []int{1, 16} {
		t.Run(fmt.Sprintf("shards=%d", n), func(t *testing.T) {
			buckettest.Walk(t, func(capacity int64, rate float64, opts ...admit.Option) (*shardedbucket.Bucket, error) {
				s := n
				for s > 1 && int64(s) > capacity {
					s >>= 1
				}
				return shardedbucket.New(capacity, rate, append(opts, shardedbucket.WithShards(s))...)
			}, 300)
		})
	}
}

// TestDefaultShards holds New's documented default: the smallest power of
// two at or above GOMAXPROCS, lowered to fit the capacity.
func TestDefaultShards(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct {
		procs    int
		capacity int64
		want     int
	}{
		{1, 100, 1}, {2, 100, 2}, {3, 100, 4}, {4, 100, 4}, {5, 100, 8}, {8, 100, 8},
		{5, 5, 4}, {2, 1, 1}, {4, 3, 2},
	} {
		runtime.GOMAXPROCS(tc.procs)
		b, err := shardedbucket.New(tc.capacity, 1)
		require.NoError(t, err)
		assert.Equal(t, tc.want, b.Shards(), "GOMAXPROCS %d, capacity %d", tc.procs, tc.capacity)
	}
}
