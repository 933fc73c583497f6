package shardedbucket

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/cpu"

	"github.com/admit-go/admit"
)

func TestShardIsOneCacheLine(t *testing.T) {
	assert.Equal(t, unsafe.Sizeof(cpu.CacheLinePad{}), unsafe.Sizeof(shard{}),
		"a shard fills exactly one cache line, so neighbours never share one")
	b, err := New(64, 1, WithShards(8))
	require.NoError(t, err)
	for i := 1; i < len(b.shards); i++ {
		d := uintptr(unsafe.Pointer(&b.shards[i].z)) - uintptr(unsafe.Pointer(&b.shards[i-1].z))
		assert.Equal(t, unsafe.Sizeof(cpu.CacheLinePad{}), d)
	}
}

func TestSplitIsExact(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
		shards   int
	}{{100, 1, 8}, {100, 1e9, 8}, {7, 3, 4}, {1e9, 1e9, 64}, {3, 1e-6, 2}, {64, 1, 64}} {
		b, err := New(tc.capacity, tc.rate, WithShards(tc.shards))
		require.NoError(t, err)
		var sum, lo, hi int64 = 0, b.shards[0].cap, b.shards[0].cap
		for i := range b.shards {
			sum += b.shards[i].cap
			lo, hi = min(lo, b.shards[i].cap), max(hi, b.shards[i].cap)
		}
		assert.Equal(t, b.p.Cap, sum, "capacities add up to the whole: %+v", tc)
		assert.LessOrEqual(t, hi-lo, int64(1), "and differ by at most a unit")
		// The shards' streams add up to the bucket's, at any time.
		r := rand.New(rand.NewPCG(1, uint64(tc.shards)))
		for range 200 {
			v := b.p.V(r.Int64N(1 << 62))
			var vs int64
			for i := range b.shards {
				vs += b.g.vi(&b.shards[i], v)
			}
			require.Equal(t, v, vs)
		}
	}
	b, err := New(100, 1, WithShards(8))
	require.NoError(t, err)
	assert.Equal(t, int64(25)<<(b.p.Shift-1), b.shards[0].cap, "100 tokens over 8 shards is exactly 12.5 each")
}

func TestShardCount(t *testing.T) {
	b, err := New(1e6, 1)
	require.NoError(t, err)
	n := b.Shards()
	assert.Equal(t, 0, n&(n-1), "a power of two")
	assert.GreaterOrEqual(t, n, runtime.GOMAXPROCS(0), "one per P by default")
	b, err = New(3, 1)
	require.NoError(t, err)
	assert.LessOrEqual(t, b.Shards(), 2, "never more shards than tokens")
	for _, bad := range []int{0, -1, 3, 6, maxShards * 2} {
		_, err := New(1e6, 1, WithShards(bad))
		assert.ErrorIs(t, err, admit.ErrInvalidConfig, "WithShards(%d)", bad)
	}
	_, err = New(4, 1, WithShards(8))
	assert.ErrorIs(t, err, admit.ErrInvalidConfig, "8 shards for 4 tokens")
	assert.ErrorContains(t, err, "8")
}

// TestSoonest checks the rank order level uses: rank r is the shard whose
// stream receives its next unit r-th soonest after v.
func TestSoonest(t *testing.T) {
	b, err := New(64, 1, WithShards(8))
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(7, 8))
	for range 100 {
		v, start := r.Int64N(1<<40), uint(r.IntN(8))
		at := b.soonest(v, start)
		seen := map[int]bool{}
		prev := int64(-1)
		for rank := range 8 {
			pos := at(rank)
			require.False(t, seen[pos], "a permutation")
			seen[pos] = true
			i := int64((start + uint(pos)) & b.mask)
			// The index of shard i's next unit: v itself if v's block is
			// i's, else the start of i's next block.
			next, blk := v, v>>b.g.blockShift
			if d := (i - blk) & int64(b.mask); d > 0 {
				next = (blk + d) << b.g.blockShift
			}
			require.GreaterOrEqual(t, next, v)
			require.Greater(t, next, prev, "rank %d receives a unit after rank %d", rank, rank-1)
			prev = next
		}
	}
}

// TestGeometry checks the deal of the stream to the shards against a
// unit-by-unit count, on buckets whose blocks are a few units long: the
// shards' streams sum to the bucket's, and each is dealt whole blocks in
// turn.
func TestGeometry(t *testing.T) {
	for _, tc := range []struct {
		rate   float64
		shards int
	}{{1e9, 1}, {1e9, 4}, {4e8, 2}, {1e8, 4}, {1e8, 8}, {3e8, 16}} {
		b, err := New(64, tc.rate, WithShards(tc.shards))
		require.NoError(t, err)
		count := make([]int64, tc.shards) // brute force: units dealt so far
		for v := int64(0); v < 40*b.g.block*int64(tc.shards); v++ {
			var sum int64
			for i := range b.shards {
				s := &b.shards[i]
				require.Equal(t, count[i], b.g.vi(s, v), "%+v: shard %d at %d", tc, i, v)
				sum += count[i]
			}
			require.Equal(t, v, sum)
			count[(v>>b.g.blockShift)&int64(b.mask)]++ // unit v goes to its block's shard
		}
	}
}
