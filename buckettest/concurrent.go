package buckettest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// concurrentReservations races blocking AcquireN calls, and the cancels of
// earlier ones, on a dry bucket whose fake clock does not move: every call
// must reserve (rule 3: one atomic step), so once the stayers are all
// asleep the balance is at most minus their tokens. A reservation or an
// undo that published its state without checking that nothing was
// published since its load (a store in place of a compare-and-swap) loses
// a concurrent reservation, and the balance ends above that. The race is
// not forced: the rounds give it many chances, and the check is exact
// whenever it happens; on a correct bucket it holds in every round.
func (s suite) concurrentReservations(t *testing.T) {
	for _, tc := range []struct{ rounds, stayers, leavers int }{
		{200, 16, 4}, // many reservations race each other
		{1000, 8, 1}, // the one leaver's undo, a refund, races them
	} {
		t.Run(fmt.Sprintf("stayers=%d/leavers=%d", tc.stayers, tc.leavers), func(t *testing.T) {
			reserveRounds(t, s, tc.rounds, tc.stayers, tc.leavers)
		})
	}
}

func reserveRounds(t *testing.T, s suite, rounds, stayers, leavers int) {
	for r := range rounds {
		l, clk := s.fake(t, 1, 1)
		require.True(t, l.TryAcquire())
		var wg, left sync.WaitGroup
		// The leavers reserve first, one after another, and are cancelled
		// while the stayers reserve: their undos race the reservations.
		leave, cancelLeavers := context.WithCancel(context.Background())
		for i := range leavers {
			left.Go(func() { _ = l.Acquire(leave) })
			waitFor(t, clk, i+1)
		}
		stay, cancelStayers := context.WithCancel(context.Background())
		ready, gate := sync.WaitGroup{}, make(chan struct{})
		ready.Add(stayers + 1)
		for range stayers {
			wg.Go(func() {
				ready.Done()
				<-gate
				_ = l.Acquire(stay)
			})
		}
		go func() {
			ready.Done()
			<-gate
			cancelLeavers()
		}()
		ready.Wait()
		close(gate)
		left.Wait()
		waitFor(t, clk, stayers) // the leavers have left: these are the stayers
		tok := l.Tokens()
		cancelStayers()
		wg.Wait()
		if !assert.LessOrEqual(t, tok, -float64(stayers), fmt.Sprintf("round %d: %d waiters reserve a token each on a dry bucket whose clock stands still", r, stayers)) {
			return
		}
	}
}
