package shardedbucket

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/cpu"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
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

// TestDryBound checks the dry bound: once a gather has found the shards
// short of a whole token, later rejections read one word and write nothing,
// the bound lifts exactly when a token can exist, and a give-back (an undone
// reservation) lifts it at once.
func TestDryBound(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(8, 1, WithShards(4), admit.WithClock(clk))
	require.NoError(t, err)
	require.True(t, b.TryAcquireN(8))
	clk.Advance(250 * time.Millisecond) // a quarter token, spread over the shards
	assert.False(t, b.TryAcquire())
	dry := b.dry.Load()
	require.Equal(t, b.p.V(b.clk.Now())+b.p.Units(1)-b.p.Units(1)/4, dry, "a gather publishes when the missing 3/4 token will exist")
	before := make([]int64, len(b.shards))
	for i := range b.shards {
		before[i] = b.shards[i].z.Load()
	}
	for range 10 {
		assert.False(t, b.TryAcquire())
	}
	assert.Equal(t, dry, b.dry.Load(), "rejections under the bound write nothing")
	for i := range b.shards {
		assert.Equal(t, before[i], b.shards[i].z.Load(), "shard %d written by a rejection", i)
	}
	clk.Advance(750*time.Millisecond - 1)
	assert.False(t, b.TryAcquire(), "1 ns before a whole token")
	clk.Advance(1)
	assert.True(t, b.TryAcquire(), "a token exists exactly when the bound says")

	// A reservation undone gives units back: the bound must not hide them.
	c, err := New(8, 1, WithShards(4), admit.WithClock(clk))
	require.NoError(t, err)
	require.True(t, c.TryAcquireN(6))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.AcquireN(ctx, 3) }() // takes the 2 tokens and reserves a third
	require.NoError(t, clk.WaitForSleepers(context.Background(), 1))
	assert.False(t, c.TryAcquire())
	require.Greater(t, c.dry.Load(), c.p.V(c.clk.Now()), "the failed gather published a dry bound")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	assert.Less(t, c.dry.Load(), int64(0), "the give-back withdrew the bound")
	assert.True(t, c.TryAcquireN(2), "the undone reservation's 2 tokens are there at once")
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

// TestSchedule checks schedule against stepping the stream unit by unit:
// the least w at which the shards, drained and refilled, supply need.
func TestSchedule(t *testing.T) {
	b, err := New(16, 1e8, WithShards(4))
	require.NoError(t, err)
	vmax := b.p.V(1 << 62)
	r := rand.New(rand.NewPCG(3, 4))
	bal := make([]int64, 4)
	for range 2000 {
		v := r.Int64N(1 << 20)
		for i := range bal {
			bal[i] = r.Int64N(b.shards[i].cap+30) - 30 // debt included
		}
		need := 1 + r.Int64N(b.p.Cap)
		supply := func(w int64) (sum int64) {
			for i := range bal {
				s := &b.shards[i]
				sum += min(s.cap, max(0, bal[i]+b.g.vi(s, w)-b.g.vi(s, v)))
			}
			return sum
		}
		w := v
		for supply(w) < need {
			w++
		}
		got, ok := b.schedule(v, vmax, bal, need)
		require.True(t, ok)
		require.Equal(t, w, got, "bal %v need %d at %d", bal, need, v)
		if w > v {
			require.Equal(t, need, supply(w), "exactly need at w")
		}
	}
	// Without refill no amount of waiting helps.
	z, err := New(16, 0, WithShards(4))
	require.NoError(t, err)
	_, ok := z.schedule(0, z.p.V(1<<62), make([]int64, 4), 1)
	require.False(t, ok)
}

// TestReservationsAtTheRate stacks reservations of random sizes on a drained
// bucket of many shards and checks that each wakes exactly when the stream
// has produced every unit reserved so far, as one bucket's would: the next
// units of the stream go to the oldest waiter wherever they are dealt. A
// reservation of more than capacity − shards tokens may wake later, by less
// than shards tokens' refill, because no shard gives one more than its
// capacity.
func TestReservationsAtTheRate(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
		shards   int
	}{{16, 1, 8}, {16, 1e8, 8}, {100, 6e6, 2}, {7, 3, 4}, {64, 1e9, 16}, {1000, 1, 4}, {11, 1, 8}, {20, 100, 16}} {
		clk := buckettest.NewFakeClock(0)
		b, err := New(tc.capacity, tc.rate, WithShards(tc.shards), admit.WithClock(clk))
		require.NoError(t, err)
		require.True(t, b.TryAcquireN(tc.capacity))
		clk.Advance(time.Duration(float64(time.Second) / tc.rate / 3)) // a third of a token: inside a block
		r := rand.New(rand.NewPCG(uint64(tc.capacity), uint64(tc.shards)))
		now := b.clk.Now()
		owed := b.p.V(0) // drained at 0: the stream value the reservations so far are covered at
		exact := 0
		for k := range 60 {
			n := 1 + r.Int64N(tc.capacity)
			wait, undo := b.reserve(b.p.Units(n), 1<<62)
			require.NotNil(t, undo, "%+v: reservation %d", tc, k)
			want := b.p.When(now, owed+b.p.Units(n)) - now
			// Within a block per shard of the capacity, a request may be late
			// by less than a block per shard.
			blocks := b.g.block * int64(tc.shards)
			if b.p.Units(n) <= b.p.Cap-blocks {
				require.Equal(t, want, wait, "%+v: reservation %d of %d tokens", tc, k, n)
				exact++
			} else {
				require.GreaterOrEqual(t, wait, want, "%+v: reservation %d of %d tokens", tc, k, n)
				require.Less(t, wait, b.p.When(now, owed+b.p.Units(n)+blocks)-now, "%+v: reservation %d of %d tokens", tc, k, n)
				require.LessOrEqual(t, blocks, b.p.Units(min(int64(tc.shards), (tc.capacity+3)/4)), "%+v: the documented lateness", tc)
			}
			owed = b.p.V(now + wait)
		}
		require.NotZero(t, exact, "%+v", tc)
	}
}

// TestPutBackAfterReservation replays a lost gather around a reservation
// (an independent review's construction): the gather has taken shard 0's
// token, a blocking AcquireN(2) plans without it and takes shard 1, then
// the gather finds shard 1 short and puts shard 0 back. Put back, the token
// would be free while the waiter sleeps, and a TryAcquire would overtake
// it; so a put-back after a reservation forfeits instead. Without one in
// between, the put-back restores the units.
func TestPutBackAfterReservation(t *testing.T) {
	for _, resv := range []bool{true, false} {
		clk := buckettest.NewFakeClock(0)
		b, err := New(8, 1, admit.WithClock(clk), WithShards(2))
		require.NoError(t, err)
		clk.Advance(time.Second) // the next block (block 1) is shard 1's
		v := b.p.V(clk.Now())
		one := b.p.Units(1)
		require.True(t, b.takeAt(3*one, v, 0)) // shard 0: 1 token left
		require.True(t, b.takeAt(3*one, v, 1)) // shard 1: 1 token left
		// The gather (TryAcquireN(2)) takes shard 0's token first.
		g0 := b.resvGen.Load()
		s0 := &b.shards[0]
		bal, z, base := s0.state(v, &b.g)
		require.Equal(t, one, bal)
		require.True(t, s0.z.CompareAndSwap(z, base+one))
		take, olds, news := []int64{one}, []int64{z}, []int64{base + one}
		if resv {
			wait, undo := b.reserve(2*one, 1<<62)
			require.NotNil(t, undo, "a blocking AcquireN(2) waits")
			require.Positive(t, wait)
			bal1, _, _ := b.shards[1].state(v, &b.g)
			require.Less(t, bal1, one, "the reservation took shard 1")
		} else {
			require.True(t, b.takeAt(one, v, 1), "shard 1's token goes to someone else")
		}
		b.putBack(0, take, olds, news, g0)
		if resv {
			assert.False(t, b.TryAcquire(), "no TryAcquire overtakes the sleeping waiter")
		} else {
			assert.True(t, b.TryAcquire(), "the put-back restored shard 0's token")
			assert.False(t, b.TryAcquire())
		}
	}
}

// TestLostGatherInsideReserve replays, on one goroutine, the interleaving
// that once hung the whole bucket: a blocking AcquireN(3) whose first
// gather loses a race, then finds the shards holding enough (w == v) and
// takes them like TryAcquire, and loses that gather's race too. Its
// put-back must not wait for resvMu, which reserve held there: it did,
// and reserve never returned, and neither did any later caller that needed
// resvMu. Both lost races are staged by testHookGather, which takes one
// token, first, from the shard the gather planned to take the most from.
func TestLostGatherInsideReserve(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(8, 1, WithShards(2), admit.WithClock(clk))
	require.NoError(t, err)
	one := b.p.Units(1)
	v := b.p.V(clk.Now())
	require.True(t, b.takeAt(2*one, v, 0))
	require.True(t, b.takeAt(2*one, v, 1)) // 2 tokens in each shard
	lost := 0
	testHookGather = func(b *Bucket, v int64, start uint, take []int64) {
		assert.True(t, stealOne(b, v, start, take), "the shard planned holds a token") // not require: on reserve's goroutine
		lost++
	}
	defer func() { testHookGather = nil }()

	var wait int64
	var undo func() bool
	buckettest.Watchdog(t, 10*time.Second, "reserve to return after two lost gathers", func() {
		wait, undo = b.reserve(3*one, 1<<62)
	})
	testHookGather = nil
	require.Equal(t, 2, lost, "the first take and the one at w == v each lost a race")
	require.NotNil(t, undo, "the two stolen tokens leave one missing: AcquireN(3) waits")
	assert.Equal(t, int64(time.Second), wait, "for the one missing token at 1 token/s")
	assert.InDelta(t, -1.0, b.Tokens(), 1e-9, "the 2 tokens left are reserved, and one more")
	assert.True(t, undo(), "cancelled before its wake")
	assert.InDelta(t, 2.0, b.Tokens(), 1e-9, "the lost gathers' put-backs and the undo gave everything back")
	assert.True(t, b.TryAcquireN(2), "and nothing holds resvMu")
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
