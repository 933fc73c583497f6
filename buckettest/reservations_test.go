package buckettest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/casbucket"
	"github.com/admit-go/admit/gcra"
	"github.com/admit-go/admit/mutexbucket"
	"github.com/admit-go/admit/shardedbucket"
)

// reservationRates are the rates FuzzReservations picks from; the clock
// steps scale with each one's token period.
var reservationRates = []float64{1, 0.5, 3, 1.0 / 3, 1000, 1e9, 7.3}

// FuzzReservations interleaves every operation that changes a bucket's
// state on a fake clock: TryAcquireN, blocking AcquireN (which reserves and
// sleeps), cancellation of a sleeping waiter, small clock steps, and steps
// that refill past the cap. It records every admission at its time (a
// waiter that returns nil at its wake) and checks, for each bucket, the
// bound on every window of the sequence: at most capacity + rate × T + 1.
// mutexbucket, casbucket and gcra share their arithmetic, so they must also
// admit exactly the same tokens at the same times. At the end every waiter is
// cancelled and, once the refill has caught up with every reservation ever
// made, the bucket must be full again: no debt leaks.
//
// ops is read two bytes at a time; the first byte's value modulo 6 picks
// the operation and the second is its argument:
//
//	0 TryAcquireN(arg % (capacity+2)), or a drain (TryAcquire until it
//	  fails) where that is 0
//	1 AcquireN(arg % (capacity+2)) in a new goroutine (at most 24 pending)
//	2 cancel the pending waiter arg % len(pending)
//	3 advance arg/16 token periods
//	4 advance (arg%4 + 1) × capacity token periods: refill past the cap
//	5 advance arg nanoseconds
func FuzzReservations(f *testing.F) {
	// The review's scenarios: capacity 2 at 1/s, drained, 13 waiters of 2,
	// the first ten cancelled, then time passes in steps with drains.
	queue := []byte{0, 0}
	for range 13 {
		queue = append(queue, 1, 2)
	}
	for range 10 {
		queue = append(queue, 2, 0)
	}
	later := append([]byte{}, queue...)
	for range 30 {
		later = append(later, 3, 16, 0, 0)
	}
	f.Add(uint8(1), uint8(0), uint8(0), later)
	clamp := append([]byte{}, queue...)
	clamp = append(clamp, 3, 160, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 4, 1, 0, 0)
	f.Add(uint8(1), uint8(0), uint8(0), clamp)
	// Thin tokens: capacity 8 at 1e9/s over 8 shards, drained, 3 ns, a
	// request for 5, cancelled.
	f.Add(uint8(7), uint8(5), uint8(3), []byte{0, 0, 5, 3, 1, 5, 2, 0, 0, 0})
	f.Add(uint8(4), uint8(2), uint8(1), []byte{1, 3, 1, 5, 1, 2, 3, 40, 2, 1, 0, 6, 4, 0, 1, 6, 3, 3, 2, 0, 0, 1, 3, 200})
	f.Add(uint8(9), uint8(3), uint8(2), []byte{0, 10, 1, 10, 1, 10, 1, 4, 2, 2, 2, 1, 4, 3, 1, 11, 3, 255, 0, 11})
	// An independent review's construction against per-shard give-backs
	// (capacity 16 at 1e9/s over 2 shards, one unit a token): reservations
	// stacked and cancelled so that one shard ends full and the other deep
	// in debt, a reservation of 16 levelled entirely onto the full shard,
	// then the debt beneath it cancelled newest first. Both home parities.
	review := []byte{0, 8, 1, 16, 1, 1, 2, 0, 1, 13, 1, 1, 2, 1, 1, 14, 1, 1, 2, 2, 1, 15, 1, 1, 2, 3,
		1, 16, 1, 1, 2, 4, 1, 16, 2, 4, 2, 3, 2, 2, 2, 1, 2, 0, 5, 16, 0, 0}
	f.Add(uint8(15), uint8(5), uint8(1), review)
	f.Add(uint8(15), uint8(5), uint8(1), append([]byte{5, 1}, review...))
	f.Fuzz(func(t *testing.T, capSel, rateSel, shardSel uint8, ops []byte) {
		if len(ops) > 400 {
			ops = ops[:400]
		}
		capacity := int64(capSel%16) + 1
		rate := reservationRates[int(rateSel)%len(reservationRates)]
		shards := 1 << (shardSel % 4)
		for int64(shards) > capacity {
			shards >>= 1
		}
		makers := []struct {
			name string
			make func(clk admit.Clock) (admit.Limiter, error)
		}{
			{"mutexbucket", func(clk admit.Clock) (admit.Limiter, error) {
				return mutexbucket.New(capacity, rate, admit.WithClock(clk))
			}},
			{"casbucket", func(clk admit.Clock) (admit.Limiter, error) {
				return casbucket.New(capacity, rate, admit.WithClock(clk))
			}},
			{"gcra", func(clk admit.Clock) (admit.Limiter, error) {
				return gcra.New(capacity, rate, admit.WithClock(clk))
			}},
			{fmt.Sprintf("shardedbucket/shards=%d", shards), func(clk admit.Clock) (admit.Limiter, error) {
				return shardedbucket.New(capacity, rate, admit.WithClock(clk), shardedbucket.WithShards(shards))
			}},
		}
		var results [][]buckettest.Admission
		for _, mk := range makers {
			clk := buckettest.NewFakeClock(-1 << 40)
			l, err := mk.make(clk)
			require.NoError(t, err)
			adm := replay(t, l, clk, capacity, rate, ops)
			require.NoError(t, buckettest.CheckAdmissions(capacity, rate, adm), "%s: capacity %d, rate %v", mk.name, capacity, rate)
			results = append(results, adm)
		}
		require.Equal(t, results[0], results[1], "mutexbucket and casbucket admitted differently")
		// gcra's one word is the same arithmetic as mutexbucket's pair
		// (z = V(last) − tokens), and the clock here never runs backwards,
		// where their stale-reading rules differ.
		require.Equal(t, results[0], results[2], "mutexbucket and gcra admitted differently")
	})
}

// replay runs ops (see FuzzReservations) against l and returns every
// admission, non-blocking takes first, then waiters in start order.
func replay(t *testing.T, l admit.Limiter, clk *buckettest.FakeClock, capacity int64, rate float64, ops []byte) []buckettest.Admission {
	period := time.Second
	if rate > 0 {
		period = time.Duration(float64(time.Second) / rate)
	}
	ws := buckettest.NewWaiters(l, clk)
	defer ws.Close()
	var took []buckettest.Admission
	started := int64(0)
	for i := 0; i+1 < len(ops); i += 2 {
		op, arg := ops[i]%6, ops[i+1]
		switch op {
		case 0:
			n := int64(arg) % (capacity + 2)
			if n == 0 {
				for l.TryAcquire() {
					took = append(took, buckettest.Admission{At: clk.Now(), N: 1})
				}
			} else if l.TryAcquireN(n) {
				took = append(took, buckettest.Admission{At: clk.Now(), N: n})
			}
		case 1:
			if len(ws.Pending()) < 24 {
				ws.Start(int64(arg) % (capacity + 2))
				started++
			}
		case 2:
			if p := ws.Pending(); len(p) > 0 {
				ws.Cancel(p[int(arg)%len(p)])
			}
		case 3:
			ws.Advance(period * time.Duration(arg) / 16)
		case 4:
			ws.Advance(period * time.Duration(capacity*(int64(arg)%4+1)))
		case 5:
			ws.Advance(time.Duration(arg))
		}
	}
	for _, i := range ws.Pending() {
		ws.Cancel(i)
	}
	if rate > 0 {
		// Forfeited reservations keep the bucket in debt until the refill
		// stream has caught up with them: at most every waiter's tokens.
		ws.Advance(period * time.Duration((started+1)*(capacity+1)+capacity))
		require.Equal(t, float64(capacity), l.Tokens(), "full again after a long idle span: no debt leaked")
	}
	return append(took, ws.Admissions()...)
}
