package buckettest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/casbucket"
	"github.com/admit-go/admit/mutexbucket"
	"github.com/admit-go/admit/shardedbucket"
)

// rates the fuzzer picks from: fractional, whole, tiny, huge and zero.
var rates = []float64{0.5, 1.0 / 3, 1, 3, 7.3, 1000, 1e5, 1e9, 1e-6, 0}

// FuzzDifferential drives the three buckets through the same random sequence
// of clock advances and TryAcquireN calls on one fake clock.
//
//   - casbucket must decide exactly as mutexbucket, the reference, and report
//     the same balance, after every call.
//   - mutexbucket and shardedbucket must each respect the bound in every
//     window of the sequence: what they admit between two instants t1 <= t2
//     is at most capacity + rate × (t2 − t1), +1 for rounding.
//   - In the saturated mode (a caller that asks at every whole token: after
//     every advance, each bucket is drained), shardedbucket must never have
//     admitted more than mutexbucket, nor trail it by more than its shard
//     count. Outside that mode their decisions may diverge both ways: a
//     shard that sits full while its home-drained siblings are not discards
//     its share of the refill, which one bucket would keep, so shardedbucket
//     may reject what mutexbucket admits and admit later what mutexbucket,
//     having spent its tokens, rejects (see the shardedbucket package doc).
//
// ops is read three bytes at a time: an even first byte advances the clock by
// the next two bytes shifted left by (first/2)%40 ns (up to about a year); an
// odd one calls TryAcquireN(second % (capacity+2)), which covers 0 and
// capacity+1, or in the saturated mode sets the chunk size the drains use.
// Bit 2 of shardSel selects the saturated mode.
func FuzzDifferential(f *testing.F) {
	f.Add(uint8(9), uint8(0), uint8(2), []byte{1, 10, 0, 0, 1, 0, 1, 3, 0, 20, 200, 0, 1, 5, 0})
	f.Add(uint8(0), uint8(4), uint8(0), []byte{1, 1, 0, 1, 1, 0, 2, 0, 1, 1, 1, 0})
	f.Add(uint8(99), uint8(7), uint8(3), []byte{1, 100, 0, 0, 0, 7, 1, 3, 0, 1, 3, 0, 0, 0, 1, 1, 1, 0})
	f.Add(uint8(15), uint8(1), uint8(3), []byte{1, 16, 0, 40, 255, 255, 1, 16, 0, 1, 1, 0, 60, 1, 0, 1, 9, 0})
	f.Add(uint8(7), uint8(8), uint8(2), []byte{1, 8, 0, 20, 100, 3, 1, 2, 0, 1, 2, 0, 1, 2, 0, 0, 0, 2, 1, 1, 0})
	f.Add(uint8(3), uint8(9), uint8(1), []byte{1, 4, 0, 70, 255, 255, 1, 1, 0, 1, 4, 0})
	f.Fuzz(func(t *testing.T, capSel, rateSel, shardSel uint8, ops []byte) {
		if len(ops) > 600 {
			ops = ops[:600] // 200 operations keep each run fast
		}
		capacity := int64(capSel%100) + 1
		rate := rates[int(rateSel)%len(rates)]
		shards := 1 << (shardSel % 4)
		for int64(shards) > capacity {
			shards >>= 1
		}
		clk := buckettest.NewFakeClock(-12345)
		m, err := mutexbucket.New(capacity, rate, admit.WithClock(clk))
		require.NoError(t, err)
		c, err := casbucket.New(capacity, rate, admit.WithClock(clk))
		require.NoError(t, err)
		s, err := shardedbucket.New(capacity, rate, admit.WithClock(clk), shardedbucket.WithShards(shards))
		require.NoError(t, err)

		saturated := shardSel&4 != 0
		var byM, byS int64 // tokens admitted
		winM, winS := buckettest.NewBound(capacity, rate), buckettest.NewBound(capacity, rate)
		try := func(i int, n int64) {
			gotM := m.TryAcquireN(n)
			require.Equal(t, gotM, c.TryAcquireN(n), "op %d: casbucket and mutexbucket disagree on TryAcquireN(%d)", i, n)
			require.Equal(t, m.Tokens(), c.Tokens(), "op %d: balances differ", i)
			if gotM {
				byM += n
				require.True(t, winM.Admit(clk.Now(), n), "op %d: mutexbucket exceeds capacity + rate × window", i)
			}
			if s.TryAcquireN(n) {
				byS += n
				require.True(t, winS.Admit(clk.Now(), n), "op %d: shardedbucket exceeds capacity + rate × window", i)
			}
		}
		// drain asks at every whole token: chunks of n while they fit, then
		// single tokens, until no bucket admits anything.
		drain := func(i int, n int64) {
			for range capacity + 1 {
				try(i, n)
			}
			for range capacity + 1 {
				try(i, 1)
			}
			require.False(t, m.TryAcquire() || c.TryAcquire() || s.TryAcquire(), "op %d: drained", i)
			require.LessOrEqual(t, byS, byM, "op %d: shardedbucket admitted more than mutexbucket", i)
			require.LessOrEqual(t, byM-byS, int64(shards), "op %d: shardedbucket trails mutexbucket by more than %d shards", i, shards)
		}
		chunk := int64(1)
		if saturated {
			drain(-1, capacity)
		}
		for i := 0; i+2 < len(ops); i += 3 {
			op, a, b := ops[i], ops[i+1], ops[i+2]
			switch {
			case op%2 == 1 && saturated:
				chunk = int64(a)%capacity + 1
			case op%2 == 1:
				try(i/3, int64(a)%(capacity+2))
			default:
				clk.Advance(time.Duration((int64(a)<<8 | int64(b)) << (op / 2 % 40)))
				if saturated {
					drain(i/3, chunk)
				}
			}
		}
	})
}
