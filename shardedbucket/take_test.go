package shardedbucket

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

func TestLevel(t *testing.T) {
	for _, tc := range []struct {
		bal  []int64
		keep int64
		want []int64 // remaining
	}{
		{[]int64{25, 25, 25, 25}, 26, []int64{6, 6, 7, 7}},
		{[]int64{0, 0, 0, 0}, -10, []int64{-3, -3, -2, -2}},
		{[]int64{-5, 2, 0}, -4, []int64{-5, 0, 1}},
		{[]int64{0, 10, 3}, 5, []int64{0, 2, 3}},
		{[]int64{5, 5}, 0, []int64{0, 0}},
		{[]int64{5, 5}, 10, []int64{5, 5}},
		{[]int64{9, 1, 0, 4}, 7, []int64{3, 1, 0, 3}},
		{[]int64{1}, 1, []int64{1}},
	} {
		take := make([]int64, len(tc.bal))
		level(tc.bal, take, tc.keep, func(rank int) int { return rank })
		var kept int64
		for i := range take {
			rem := tc.bal[i] - take[i]
			require.GreaterOrEqual(t, take[i], int64(0))
			kept += rem
		}
		require.Equal(t, tc.keep, kept, "%+v", tc)
		got := make([]int64, len(take))
		for i := range take {
			got[i] = tc.bal[i] - take[i]
		}
		assert.ElementsMatch(t, tc.want, got, "%+v", tc)
	}
}

// TestFewest checks the plan gathers use below half the caps: need units
// from the fullest shards first, so that at most one shard is left with
// part of its balance, and every shard not taken from holds no more than
// the least of those emptied.
func TestFewest(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		bal := make([]int64, 1+r.IntN(16))
		var pos int64
		for i := range bal {
			bal[i] = r.Int64N(40) - 10
			pos += max(bal[i], 0)
		}
		if pos == 0 {
			continue
		}
		need := 1 + r.Int64N(pos)
		take := make([]int64, len(bal))
		fewest(bal, take, need)
		var sum int64
		partial := 0
		emptied, untouched := int64(1<<62), int64(-1<<62)
		for i := range bal {
			require.GreaterOrEqual(t, take[i], int64(0))
			require.LessOrEqual(t, take[i], max(bal[i], 0), "bal %v take %v", bal, take)
			sum += take[i]
			switch {
			case take[i] > 0 && take[i] < bal[i]:
				partial++
			case take[i] > 0:
				emptied = min(emptied, bal[i])
			default:
				untouched = max(untouched, bal[i])
			}
		}
		require.Equal(t, need, sum, "bal %v take %v", bal, take)
		require.LessOrEqual(t, partial, 1, "bal %v take %v", bal, take)
		require.LessOrEqual(t, untouched, emptied, "fullest first: bal %v take %v", bal, take)
	}
}

// TestRejectWritesNothing checks that a rejection, slow path included, only
// loads: every shard word is unchanged afterwards.
func TestRejectWritesNothing(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(8, 1, WithShards(4), admit.WithClock(clk))
	require.NoError(t, err)
	require.True(t, b.TryAcquireN(7))
	clk.Advance(500 * time.Millisecond) // 1.5 tokens, spread over four shards
	before := make([]int64, len(b.shards))
	for i := range b.shards {
		before[i] = b.shards[i].z.Load()
	}
	assert.False(t, b.TryAcquireN(2))
	for i := range b.shards {
		assert.Equal(t, before[i], b.shards[i].z.Load(), "shard %d written by a rejection", i)
	}
	assert.True(t, b.TryAcquire(), "fractions held by several shards add up to a token")
}

// TestGatherStorm drives the slow path (requests larger than any shard)
// and its put-back race from many goroutines: the global bound must hold.
func TestGatherStorm(t *testing.T) {
	const capacity, rate = 64, 1e5
	b, err := New(capacity, rate, WithShards(16))
	require.NoError(t, err)
	admitted, elapsed := buckettest.Storm(b, 16, 30*time.Millisecond, func(i int) int64 { return int64(1 + i%9) })
	assert.LessOrEqual(t, float64(admitted), capacity+rate*elapsed.Seconds()+1)
	tok := b.Tokens()
	assert.True(t, tok >= 0 && tok <= capacity, "Tokens() = %v", tok)
}

func TestAllocs(t *testing.T) {
	b, err := New(1e9, 1e9)
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { b.TryAcquire() }), "admit")
	e, err := New(2, 1e-6, WithShards(2))
	require.NoError(t, err)
	e.TryAcquireN(2)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { e.TryAcquire() }), "reject")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { e.TryAcquireN(2) }), "reject, slow path")
	// An admission that gathers from several shards: its plan lives on the
	// stack (it once escaped through the test hook's call, 512 bytes a
	// gather).
	clk := buckettest.NewFakeClock(0)
	g, err := New(8, 1, WithShards(4), admit.WithClock(clk))
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		clk.Advance(8 * time.Second) // full again
		if !g.TryAcquireN(8) {       // 2 tokens from each of the 4 shards
			t.Error("a full bucket refused its capacity")
		}
	}), "admit, gathering from every shard")
}

// TestStaleReadingPerShard is the conformance suite's backward-clock case on
// one shard. A shard's balance is a function of the time (min(cap, V(t) −
// z)), so a reading from before one already applied sees what the shard had
// then: fewer tokens, never more, and it changes nothing. (Across shards
// there is no shared clock word to compare with; see the package doc.)
func TestStaleReadingPerShard(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(2, 1, WithShards(1), admit.WithClock(clk))
	require.NoError(t, err)
	clk.Advance(10 * time.Second)
	require.True(t, b.TryAcquire())
	z := b.shards[0].z.Load()
	clk.Advance(-5 * time.Second)
	assert.LessOrEqual(t, b.Tokens(), 1.0, "a reading from the past adds nothing")
	assert.False(t, b.TryAcquire(), "it sees the balance of that time, when the token it took did not exist yet")
	assert.Equal(t, z, b.shards[0].z.Load(), "and stores nothing")
	clk.Advance(5*time.Second + 500*time.Millisecond)
	require.True(t, b.TryAcquire(), "the token left at 10 s")
	assert.False(t, b.TryAcquire(), "half a second after the latest reading")
	clk.Advance(500 * time.Millisecond)
	assert.False(t, b.TryAcquireN(2), "the backward reading was not remembered")
	assert.True(t, b.TryAcquire(), "exactly one second's refill")
}

// stealOne takes a whole token at stream value v, first, from the shard
// that a gather from start planned to take the most from, as a concurrent
// TryAcquire that won the race would, and reports whether that shard held
// one. It is what tests put in testHookGather.
func stealOne(b *Bucket, v int64, start uint, take []int64) bool {
	most := 0
	for i := range take {
		if take[i] > take[most] {
			most = i
		}
	}
	s := &b.shards[(start+uint(most))&b.mask]
	one := b.p.Units(1)
	bal, z, base := s.state(v, &b.g)
	return bal >= one && s.z.CompareAndSwap(z, base+one)
}

// TestGatherShortByOneUnit stages a gather whose planned shard loses a
// single unit (a sliver of a token) between the plan and the take: the
// gather must see that the shard no longer holds its planned share, take
// nothing from it, put back what it took and refuse, never take the shard
// below zero. The whole-token bound cannot see a one-unit over-take, so
// the test reads the shards themselves.
func TestGatherShortByOneUnit(t *testing.T) {
	b, one, v := twoShardsOfTwo(t)
	stolen, theft := false, int64(0)
	testHookGather = func(b *Bucket, v int64, start uint, take []int64) {
		most := 0
		for i := range take {
			if take[i] > take[most] {
				most = i
			}
		}
		s := &b.shards[(start+uint(most))&b.mask]
		bal, z, base := s.state(v, &b.g)
		theft = bal - take[most] + 1 // leaves the shard its share less one unit
		stolen = s.z.CompareAndSwap(z, base+theft)
	}
	defer func() { testHookGather = nil }()
	assert.False(t, b.takeAt(3*one, v, 0), "the planned shard holds a unit less than its share")
	testHookGather = nil
	require.True(t, stolen)
	var sum int64
	for i := range b.shards {
		bal, _, _ := b.shards[i].state(v, &b.g)
		assert.GreaterOrEqual(t, bal, int64(0), "shard %d taken below zero", i)
		sum += bal
	}
	assert.Equal(t, 4*one-theft, sum, "the put-back gave back every take")
	assert.True(t, b.takeAt(3*one, v, 0), "with no theft, the gather takes what is left")
}
