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
