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

// TestReservationsAtTheRate stacks reservations of random sizes on a drained
// bucket of many shards and checks that each wakes exactly when the stream
// has produced every unit reserved so far, as one bucket's would, up to the
// whole capacity: reservations are made on the central word.
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
		for k := range 60 {
			n := 1 + r.Int64N(tc.capacity)
			if k == 0 {
				n = tc.capacity // the whole capacity, which shards could not give one waiter
			}
			wait, _, undo := b.reserve(b.p.Units(n), 1<<62)
			require.NotNil(t, undo, "%+v: reservation %d", tc, k)
			want := b.p.When(now, owed+b.p.Units(n)) - now
			require.Equal(t, want, wait, "%+v: reservation %d of %d tokens", tc, k, n)
			owed += b.p.Units(n)
		}
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
		g0 := b.epoch.Load()
		s0 := &b.shards[0]
		bal, z, base := s0.state(v, &b.g)
		require.Equal(t, one, bal)
		require.True(t, s0.z.CompareAndSwap(z, base+one))
		take, olds, news := []int64{one}, []int64{z}, []int64{base + one}
		if resv {
			wait, _, undo := b.reserve(2*one, 1<<62)
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

// TestLostGatherInsideReserve replays, on one goroutine, a blocking
// AcquireN whose first take (a gather, before reserve locks resvMu) loses a
// race and puts back: reserve must then lock resvMu, which the put-back held
// and released, collapse the bucket and take or reserve on the central
// word. (reserve once ran a second gather with resvMu held, whose put-back
// waited forever for the mutex its own goroutine held, and so did every
// later caller: the whole bucket hung.) The lost race is staged by
// testHookGather, which takes one token, first, from the shard the gather
// planned to take the most from.
func TestLostGatherInsideReserve(t *testing.T) {
	for _, tc := range []struct {
		need int64
		wait time.Duration
	}{{3, 0}, {4, time.Second}} {
		b, one, _ := twoShardsOfTwo(t)
		lost := 0
		testHookGather = func(b *Bucket, v int64, start uint, take []int64) {
			assert.True(t, stealOne(b, v, start, take), "the shard planned holds a token") // not require: on reserve's goroutine
			lost++
		}
		var wait int64
		var undo func() bool
		buckettest.Watchdog(t, 10*time.Second, "reserve to return after a lost gather", func() {
			wait, _, undo = b.reserve(tc.need*one, 1<<62)
		})
		testHookGather = nil
		require.Equal(t, 1, lost, "need %d: the take before the lock lost its race", tc.need)
		assert.Equal(t, int64(tc.wait), wait, "need %d: 3 tokens are left after the theft, at 1 token/s", tc.need)
		assert.NotEqual(t, int64(spread), b.c.Load(), "need %d: reserve collapsed the bucket", tc.need)
		assert.InDelta(t, float64(3-tc.need), b.Tokens(), 1e-9, "need %d: the put-back gave the gather's takes back", tc.need)
		if tc.wait > 0 {
			require.NotNil(t, undo)
			assert.True(t, undo(), "cancelled before its wake")
			assert.InDelta(t, 3.0, b.Tokens(), 1e-9, "the undo gave everything back")
			assert.True(t, b.TryAcquireN(3))
		}
		require.True(t, b.resvMu.TryLock(), "need %d: nothing holds resvMu", tc.need)
		b.resvMu.Unlock()
	}
}

// twoShardsOfTwo returns a bucket of capacity 8 in two shards with 2 tokens
// left in each, on a fake clock standing at 0, with a token's units and
// the reading v the takes used.
func twoShardsOfTwo(t *testing.T) (b *Bucket, one, v int64) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(8, 1, WithShards(2), admit.WithClock(clk))
	require.NoError(t, err)
	one = b.p.Units(1)
	v = b.p.V(clk.Now())
	require.True(t, b.takeAt(2*one, v, 0))
	require.True(t, b.takeAt(2*one, v, 1))
	return b, one, v
}
