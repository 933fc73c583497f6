package buckettest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
)

// The cases in this file interleave reservations, cancellations, refill past
// the cap and non-blocking takes on a fake clock, record every admission at
// its time (a waiter that returns nil at its wake), and check the bound on
// every window. Each one is an over-admission a review found in an earlier
// version of the buckets; storms of one operation did not.

// ledger records the admissions of one case and checks them.
type ledger struct {
	capacity int64
	rate     float64
	clk      *FakeClock
	ws       *Waiters
	took     []Admission
}

// takeAll drains l with TryAcquire at the current time, records it, and
// returns how many tokens it took.
func (g *ledger) takeAll(l admit.Limiter) int64 {
	n := drain(l)
	if n > 0 {
		g.took = append(g.took, Admission{At: g.clk.Now(), N: n})
	}
	return n
}

func (g *ledger) check(t *testing.T) {
	t.Helper()
	all := append(g.ws.Admissions(), g.took...)
	require.NoError(t, CheckAdmissions(g.capacity, g.rate, all), "waiters: %v", g.ws)
}

// thirteenWaiters sets up the first two findings' queue: capacity 2 at 1
// token/s, drained at t=0, thirteen waiters of 2 (due every 2 s up to 26 s),
// the first ten cancelled at once. The caller closes g.ws.
func (s suite) thirteenWaiters(t *testing.T) (admit.Limiter, *ledger) {
	l, clk := s.fake(t, 2, 1)
	g := &ledger{capacity: 2, rate: 1, clk: clk, ws: NewWaiters(l, clk)}
	g.takeAll(l)
	for range 13 {
		g.ws.Start(2)
	}
	for i := range 10 {
		g.ws.Cancel(i)
		err, _ := g.ws.Result(i)
		assert.Equal(t, context.Canceled, err, "waiter %d", i)
	}
	return l, g
}

// laterWaiters is the first finding: capacity 2 at 1 token/s, drained; ten
// waiters of 2 queue, then three more (due at 22, 24 and 26 s); the ten are
// cancelled at once. Refunding them would let the bucket refill to capacity
// by 8 s while the three still sleep on tokens paid for long ago, and each
// would wake into a full bucket: 4 tokens at one instant. The three must
// still be admitted at their wake times, and nothing more than the bound.
func (s suite) laterWaiters(t *testing.T) {
	l, g := s.thirteenWaiters(t)
	defer g.ws.Close()
	for range 30 {
		g.ws.Advance(time.Second)
		g.takeAll(l)
	}
	for i := 10; i < 13; i++ {
		err, returned := g.ws.Result(i)
		require.True(t, returned, "waiter %d still asleep after 30 s", i)
		assert.NoError(t, err, "waiter %d is admitted at its wake time", i)
	}
	g.check(t)
}

// refundsAfterClamp is the second finding: the same queue, at 10 s the
// tokens in the bucket are taken, then the three later waiters are cancelled
// one by one, draining the bucket after each. A refund into a bucket whose
// refill the cap has already discarded admits twice; capping the refund at
// the debt is not enough.
func (s suite) refundsAfterClamp(t *testing.T) {
	l, g := s.thirteenWaiters(t)
	defer g.ws.Close()
	g.ws.Advance(10 * time.Second)
	g.takeAll(l)
	for i := 10; i < 13; i++ {
		g.ws.Cancel(i)
		g.takeAll(l)
	}
	for range 10 {
		g.ws.Advance(time.Second)
		g.takeAll(l)
	}
	g.check(t)
	// Cancelled in reverse order, stacked reservations all come back.
	l2, clk2 := s.fake(t, 2, 1)
	ws := NewWaiters(l2, clk2)
	defer ws.Close()
	drain(l2)
	for range 3 {
		ws.Start(2)
	}
	for i := 2; i >= 0; i-- {
		ws.Cancel(i)
	}
	clk2.Advance(2 * time.Second)
	assert.Equal(t, int64(2), drain(l2), "newest-first cancellations give every reservation back")
}

// pausingClock is a Clock whose next Now, once armed, reads the time and
// then blocks until released: it shows what a goroutine preempted between
// reading the clock and acting on the reading does. While one call is
// paused, the first other call closes others.
type pausingClock struct {
	*FakeClock
	mu      sync.Mutex
	armed   bool
	inPause bool
	paused  chan struct{} // closed when the armed call has read the time
	release chan struct{} // the armed call returns once this is closed
	others  chan struct{} // closed by the first other call during the pause
}

func (c *pausingClock) arm() {
	c.mu.Lock()
	c.armed = true
	c.paused, c.release, c.others = make(chan struct{}), make(chan struct{}), make(chan struct{})
	c.mu.Unlock()
}

func (c *pausingClock) Now() int64 {
	now := c.FakeClock.Now()
	c.mu.Lock()
	armed, other := c.armed, c.inPause
	c.armed, c.inPause = false, c.inPause || c.armed
	paused, release, others := c.paused, c.release, c.others
	if other {
		c.inPause = false // only the first other call signals
	}
	c.mu.Unlock()
	switch {
	case armed:
		close(paused)
		<-release
	case other:
		close(others)
	}
	return now
}

// staleUndo is the third finding: a cancelled waiter reads the clock before
// its wake, decides to give its tokens back, and is paused before it does;
// meanwhile the wake passes, the bucket refills and another caller drains
// it. The give-back must not land on top of that drain.
//
// A bucket that reads the clock under a lock (mutexbucket) serialises the
// two: the other caller cannot read the clock until the paused undo is done.
// The case tells the two kinds apart by whether the other caller reaches the
// clock at all while the undo is paused, waiting at most a few seconds for
// it; that wait only picks the interleaving, it asserts nothing.
func (s suite) staleUndo(t *testing.T) {
	const capacity = 10
	clk := &pausingClock{FakeClock: NewFakeClock(start)}
	l, err := s.make(capacity, 1, admit.WithClock(clk))
	require.NoError(t, err)
	g := &ledger{capacity: capacity, rate: 1, clk: clk.FakeClock, ws: NewWaiters(l, clk.FakeClock)}
	defer g.ws.Close()
	g.takeAll(l)
	w := g.ws.Start(capacity) // due in 10 s
	clk.arm()
	g.ws.CancelAsync(w)
	<-clk.paused // the waiter read the clock before its wake
	clk.Advance(20 * time.Second)
	// Another caller drains the refilled bucket, on its own goroutine in
	// case it queues behind the paused undo.
	var other int64
	drained := make(chan struct{})
	go func() { other = drain(l); close(drained) }()
	select {
	case <-clk.others: // it runs beside the paused undo: let it finish first
		<-drained
	case <-time.After(2 * time.Second): // it is serialised behind the undo
	}
	close(clk.release)
	<-drained
	_ = g.ws.Wait(w)
	if other > 0 {
		g.took = append(g.took, Admission{At: clk.FakeClock.Now(), N: other})
	}
	g.takeAll(l)
	g.check(t)
}

// cancelGivesAllBack is the fourth finding: with the tokens the bucket holds
// spread thinly (capacity 8 at 1e9/s, drained, 3 ns of refill), a request
// for 5 reserves; cancelled with nothing stacked on it, it must give back
// everything it took, so that the 3 tokens can be taken.
func (s suite) cancelGivesAllBack(t *testing.T) {
	l, clk := s.fake(t, 8, 1e9)
	ws := NewWaiters(l, clk)
	defer ws.Close()
	drain(l)
	clk.Advance(3)
	w := ws.Start(5)
	_, slept := ws.WakeTime(w)
	require.True(t, slept, "5 tokens are not there yet")
	ws.Cancel(w)
	err, _ := ws.Result(w)
	require.Equal(t, context.Canceled, err)
	assert.Equal(t, int64(3), drain(l), "the cancelled request gave back every unit it took")
}
