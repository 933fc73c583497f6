package adaptive

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// heldAtOne returns a limiter fixed at one permit, with a backlog of two
// that wait at most maxWait, on a fake clock, and the permit it holds.
func heldAtOne(t *testing.T, maxWait time.Duration) (*buckettest.FakeClock, *Limiter, *Permit) {
	clk := buckettest.NewFakeClock(1e9)
	l, err := New(WithClock(clk), WithInitialLimit(1), WithLimitBounds(1, 1), WithBacklog(2, maxWait))
	require.NoError(t, err)
	held, err := l.Acquire(context.Background())
	require.NoError(t, err)
	return clk, l, held
}

// acquired is what an Acquire started by startAcquire returned.
type acquired struct {
	p   *Permit
	err error
}

// startAcquire runs l.Acquire(ctx) in a goroutine; its result comes on the
// channel.
func startAcquire(l *Limiter, ctx context.Context) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() { p, err := l.Acquire(ctx); ch <- acquired{p, err} }()
	return ch
}

// A waiter whose context ends as a permit is handed to it returns
// ctx.Err(), as golang.org/x/sync/semaphore does, and the permit goes to
// the next waiter: the grant is forced to land between the context's end
// and the waiter's return by holding the limiter's mutex across both.
func TestGrantAfterContextEnded(t *testing.T) {
	bg := context.Background()
	clk, l, held := heldAtOne(t, time.Second)
	ctxA, cancelA := context.WithCancel(bg)
	a := startAcquire(l, ctxA)
	require.NoError(t, clk.WaitForSleepers(bg, 1))
	b := startAcquire(l, bg)
	require.NoError(t, clk.WaitForSleepers(bg, 2))

	l.mu.Lock()
	cancelA()
	// What held.Success() does, under the same hold of mu: the head of
	// the backlog, A, is granted the permit although its context ended.
	require.True(t, held.ended.CompareAndSwap(false, true))
	l.endLocked(held, success, clk.Now())
	require.Equal(t, 1, l.nwait, "A left the backlog with the permit; B waits")
	require.Equal(t, 1, l.inflight)
	// Waited counts a permit when its waiter takes it, not when it is
	// handed over: A gives this one back, and a count a scrape has seen
	// (admitotel exports it as a counter) must never go down.
	require.Zero(t, l.stats.Waited)
	l.mu.Unlock()

	ra := <-a
	require.ErrorIs(t, ra.err, context.Canceled)
	require.Nil(t, ra.p)
	rb := <-b
	require.NoError(t, rb.err, "the permit A gave back went to B")
	require.Equal(t, 1, l.InFlight())
	rb.p.Success()
	require.Zero(t, l.InFlight())
	s := l.Stats()
	require.Equal(t, uint64(1), s.Admitted)
	require.Equal(t, uint64(1), s.Waited, "B only")
	require.Equal(t, uint64(1), s.Cancelled)
	require.Equal(t, s.Admitted+s.Waited, s.Successes+s.Drops+s.Ignored)
}

// Many goroutines on the real clock take permits at every priority, with a
// backlog, contexts that end while they wait, a limit that moves (windows
// of three outcomes), and two ends racing on each permit, while a monitor
// checks the backlog's invariants under the mutex, over and over: the
// in-flight count never negative, no caller waiting while a permit is
// free, the backlog within its bound, and its count equal to the waiters
// linked in its queues. At the end the counters add up and nothing is
// left in flight or waiting.
func TestBacklogInvariants(t *testing.T) {
	const goroutines, rounds = 16, 1000
	l, err := New(WithInitialLimit(4), WithLimitBounds(1, 16), WithBacklog(6, 2*time.Millisecond), WithMinSamples(3))
	require.NoError(t, err)
	var stop atomic.Bool
	var violation atomic.Value
	monitor := make(chan struct{})
	go func() {
		defer close(monitor)
		for !stop.Load() {
			l.mu.Lock()
			linked := 0
			for i := range l.queues {
				for w := l.queues[i].head; w != nil; w = w.next {
					linked++
				}
			}
			switch {
			case l.inflight < 0:
				violation.Store("in flight negative")
			case l.nwait > 0 && l.inflight < l.limit:
				violation.Store("a caller waits while a permit is free")
			case l.nwait > l.cfg.backlog:
				violation.Store("backlog above its bound")
			case linked != l.nwait:
				violation.Store("waiters linked differ from the count")
			}
			l.mu.Unlock()
		}
	}()
	// What the callers saw: a permit, a shed (ErrOverloaded), or their
	// context's error (a context that ended before Acquire looked, which
	// no count holds, or while it waited: Cancelled). Counted here rather
	// than by checking ctx.Err() before Acquire: a context can end between
	// that check and Acquire's, and the totals then missed one call.
	var got, shed, ctxErr atomic.Uint64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range rounds {
				ctx := ContextWithPriority(context.Background(), Priority(rng.IntN(5)-2))
				cancel := context.CancelFunc(func() {})
				if rng.IntN(4) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(2000))*time.Microsecond)
				}
				p, err := l.Acquire(ctx)
				cancel()
				switch {
				case err == nil:
					got.Add(1)
				case errors.Is(err, admit.ErrOverloaded):
					shed.Add(1)
					continue
				case errors.Is(err, context.DeadlineExceeded):
					ctxErr.Add(1)
					continue
				default:
					violation.Store("Acquire: " + err.Error())
					continue
				}
				if rng.IntN(3) != 0 {
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				}
				var both sync.WaitGroup
				both.Add(2)
				go func() { defer both.Done(); p.Success() }()
				go func() {
					defer both.Done()
					if g%4 == 0 {
						p.Dropped()
					} else {
						p.Ignore()
					}
				}()
				both.Wait()
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	<-monitor
	if v := violation.Load(); v != nil {
		t.Fatal(v)
	}
	s := l.Stats()
	require.Zero(t, s.InFlight)
	require.Zero(t, s.Waiting)
	require.Equal(t, s.Admitted+s.Waited, s.Successes+s.Drops+s.Ignored)
	require.Equal(t, uint64(goroutines*rounds), got.Load()+shed.Load()+ctxErr.Load())
	require.Equal(t, got.Load(), s.Admitted+s.Waited, "permits")
	require.Equal(t, shed.Load(), s.Shed, "shed")
	require.LessOrEqual(t, s.Cancelled, ctxErr.Load(), "cancelled waiters returned their context's error")
	require.NotZero(t, s.Waited, "the backlog was used")
	require.NotZero(t, s.Cancelled, "contexts ended in it")
	require.Greater(t, s.Updates, uint64(10), "the limit was updated")
}

// TestLimiterSize holds the package doc's "about 4.5 KiB" (4624 bytes on
// 64-bit platforms, exactly: a field added or removed must change the doc
// too).
func TestLimiterSize(t *testing.T) {
	const documented = 4624
	got := unsafe.Sizeof(Limiter{})
	switch {
	case unsafe.Sizeof(uintptr(0)) == 8 && got != documented:
		t.Errorf("a Limiter is %d bytes; the package doc and docs/design.md say %d on 64-bit platforms", got, documented)
	case got > documented:
		// Smaller where pointers and ints are 4 bytes.
		t.Errorf("a Limiter is %d bytes, more than the %d of 64-bit platforms", got, documented)
	}
}

// TestDropsBeforeARaiseCount: drops of permits taken before a raise of the
// limit count (they were thrown away, p.start < epoch, so a timeout longer than an update window never counts
// under an algorithm that raises the limit every saturated window (AIMD
// always; Gradient and Vegas while the latency stays in band)). Ten of the
// permits hang and time out after 1 s; meanwhile fast calls fill a window
// and AIMD raises the limit 20 -> 21. The ten timeouts then arrive with 32
// more successes: 10 drops of 42 outcomes, four times the tolerance, and
// no cut has answered them. The limit must come down.
func TestDropsBeforeARaiseCount(t *testing.T) {
	clk := buckettest.NewFakeClock(1e9)
	l, err := New(WithClock(clk), WithAlgorithm(AIMD()), WithInitialLimit(20))
	if err != nil {
		t.Fatal(err)
	}
	hung := holdN(t, l, 10)
	// One saturated window of fast successes: fill the limit, get shed
	// once, end the fast calls after 1 ms.
	churn := func(untilUpdates uint64) {
		for l.Stats().Updates < untilUpdates {
			fast := fillLimit(l)
			clk.Advance(time.Millisecond)
			for _, p := range fast {
				p.Success()
				if l.Stats().Updates >= untilUpdates {
					break
				}
			}
			// the rest end outside the counted windows' concern
			for _, p := range fast {
				p.Ignore()
			}
		}
	}
	churn(1)
	if got := l.Limit(); got != 21 {
		t.Fatalf("after a saturated window without drops the limit is %d, want 21 (AIMD +1)", got)
	}
	clk.Advance(time.Second)
	for _, p := range hung {
		p.Dropped() // the callers' 1 s deadline
	}
	churn(2)
	t.Logf("stats %+v", l.Stats())
	if got := l.Limit(); got >= 21 {
		t.Errorf("after a window whose outcomes were 10 timeouts and 32 successes the limit is %d, want it cut below 21", got)
	}
}

// gatedClock is a FakeClock whose sleepers, once their context ends, wait
// for the gate before returning: the scheduling delay of a woken goroutine,
// made long enough to read Stats in between.
type gatedClock struct {
	*buckettest.FakeClock
	gate chan struct{}
}

func (c gatedClock) Sleep(ctx context.Context, d time.Duration) error {
	err := c.FakeClock.Sleep(ctx, d)
	if ctx.Err() != nil {
		<-c.gate
	}
	return err
}

// TestDisplacedCountedWithShed: Shed includes Displaced, in every snapshot.
// A displacement counted Displaced at once and Shed only when the victim's
// goroutine ran: a snapshot in between had Displaced > Shed, and Shed − Displaced −
// TimedOut (the callers shed at once) wraps around to 2^64−1.
func TestDisplacedCountedWithShed(t *testing.T) {
	bg := context.Background()
	clk := gatedClock{buckettest.NewFakeClock(1e9), make(chan struct{})}
	l, err := New(WithClock(clk), WithInitialLimit(1), WithLimitBounds(1, 1), WithBacklog(1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	held, err := l.Acquire(bg)
	if err != nil {
		t.Fatal(err)
	}
	low := make(chan error, 1)
	go func() { _, err := l.Acquire(ContextWithPriority(bg, Low)); low <- err }()
	if err := clk.WaitForSleepers(bg, 1); err != nil {
		t.Fatal(err)
	}
	high := make(chan error, 1)
	go func() {
		p, err := l.Acquire(ContextWithPriority(bg, High))
		if err == nil {
			p.Success()
		}
		high <- err
	}()
	// The high caller displaces the low one and sleeps in its place.
	for l.Stats().Displaced == 0 {
		time.Sleep(time.Millisecond)
	}
	s := l.Stats()
	t.Logf("snapshot after the displacement: Shed %d Displaced %d TimedOut %d; shed at once = %d", s.Shed, s.Displaced, s.TimedOut, s.Shed-s.Displaced-s.TimedOut)
	if s.Shed < s.Displaced+s.TimedOut {
		t.Errorf("Shed %d < Displaced %d + TimedOut %d: Shed must include them", s.Shed, s.Displaced, s.TimedOut)
	}
	close(clk.gate)
	<-low
	held.Success()
	if err := <-high; err != nil {
		t.Fatal(err)
	}
}

// TestLongPermitDropsHoldBounded: a server holds a few long-lived
// permits (streams, long polls: admitgrpc's StreamServerConcurrency and
// admithttp's concurrency middleware end a permit Dropped when the
// client goes away) next to many short calls that all succeed. The limit
// has only been raised since New, so cutEpoch is still New's time and
// the streams' drops count, an hour after their admission. Their window
// is lossy: one cut (fine), and a hold of raises as long as the drops'
// age, an hour, during which every call succeeds fast and the limiter
// sheds callers: the hold is capped at maxHold.
func TestLongPermitDropsHoldBounded(t *testing.T) {
	clk := buckettest.NewFakeClock(1e9)
	l, err := New(WithClock(clk), WithAlgorithm(AIMD()), WithInitialLimit(20), WithLimitBounds(1, 200))
	if err != nil {
		t.Fatal(err)
	}
	streams := holdN(t, l, 8)
	// round: fill the limit with short calls (the next is shed), d later
	// they all succeed.
	round := func(d time.Duration) {
		fast := fillLimit(l)
		clk.Advance(d)
		for _, p := range fast {
			p.Success()
		}
	}
	for range 20 {
		round(10 * time.Millisecond)
	}
	before := l.Limit()
	t.Logf("after 200 ms of fast successes: limit %d, stats %+v", before, l.Stats())
	clk.Advance(time.Hour) // the streams live on (as if traffic went on: no cut)
	for _, p := range streams {
		p.Dropped() // the clients disconnect (a client fleet redeploys)
	}
	round(10 * time.Millisecond)
	round(10 * time.Millisecond)
	cut := l.Limit()
	t.Logf("after the streams' drops: limit %d", cut)
	var maxLim int
	for range int(2 * maxHold / int64(100*time.Millisecond)) { // 100 ms rounds, each shedding a caller, no drop at all
		round(100 * time.Millisecond)
		maxLim = max(maxLim, l.Limit())
	}
	t.Logf("%v of fast successes later: limit %d (max %d), stats %+v", time.Duration(2*maxHold), l.Limit(), maxLim, l.Stats())
	if maxLim <= cut {
		t.Errorf("the limit stayed at %d for %v of lossless saturated windows after one lossy window of hour-old permits' drops (it was %d)", cut, time.Duration(2*maxHold), before)
	}
}

// holdN takes n permits from l and keeps them: calls that hang, or
// streams.
func holdN(t *testing.T, l *Limiter, n int) []*Permit {
	t.Helper()
	ps := make([]*Permit, n)
	for i := range ps {
		p, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	return ps
}

// fillLimit takes permits from l until it sheds a caller, which makes the
// window saturated, and returns them.
func fillLimit(l *Limiter) []*Permit {
	var ps []*Permit
	for {
		p, err := l.Acquire(context.Background())
		if err != nil {
			return ps
		}
		ps = append(ps, p)
	}
}

// TestNewestFirstOrder: while the backlog serves newest first (lifo), a
// priority's newest waiter gets the next permit, and a higher priority
// finding the backlog full displaces the oldest waiter of the lowest
// priority below it, the one served last, instead of the newest, the one
// served next.
func TestNewestFirstOrder(t *testing.T) {
	bg := context.Background()
	clk := buckettest.NewFakeClock(1e9)
	l, err := New(WithClock(clk), WithInitialLimit(1), WithLimitBounds(1, 1), WithBacklog(3, time.Hour))
	require.NoError(t, err)
	held, err := l.Acquire(bg)
	require.NoError(t, err)
	l.mu.Lock()
	l.lifo = true // as a window whose loss came from the backlog sets it
	l.mu.Unlock()

	type result struct {
		name string
		p    *Permit
		err  error
	}
	out := make(chan result, 4)
	acquire := func(name string, prio Priority) {
		p, err := l.Acquire(ContextWithPriority(bg, prio))
		out <- result{name, p, err}
	}
	for i, name := range []string{"low1", "low2", "low3"} {
		go acquire(name, Low)
		require.NoError(t, clk.WaitForSleepers(bg, i+1))
	}
	go acquire("high", High) // the backlog is full: a low waiter goes
	r := <-out
	require.Equal(t, "low1", r.name, "the oldest low waiter is displaced")
	require.ErrorIs(t, r.err, admit.ErrOverloaded)
	require.NoError(t, clk.WaitForSleepers(bg, 3))

	var order []string
	p := held
	for range 3 {
		p.Success()
		r := <-out
		require.NoError(t, r.err, r.name)
		order = append(order, r.name)
		p = r.p
	}
	p.Success()
	require.Equal(t, []string{"high", "low3", "low2"}, order, "the highest priority first, then the newest")
	l.mu.Lock()
	require.False(t, l.lifo, "the backlog emptied: oldest first again")
	l.mu.Unlock()
}

// TestNoGrantAfterMaxWait: a waiter whose maxWait has passed is not handed
// a permit, even while its goroutine, woken by the clock, has not yet
// taken the mutex to leave the backlog: it is shed (TimedOut), and the
// permit goes to the next waiter still within its maxWait. The release is
// forced into that gap by holding the limiter's mutex across the clock's
// step and the release. Before, the expired waiter, still at the head of
// the backlog, got the permit at its deadline and returned it as granted.
func TestNoGrantAfterMaxWait(t *testing.T) {
	bg := context.Background()
	clk, l, held := heldAtOne(t, 10*time.Millisecond)
	a := startAcquire(l, bg) // deadline at 10 ms
	require.NoError(t, clk.WaitForSleepers(bg, 1))
	clk.Advance(5 * time.Millisecond)
	b := startAcquire(l, bg) // deadline at 15 ms
	require.NoError(t, clk.WaitForSleepers(bg, 2))

	l.mu.Lock()
	clk.Advance(5 * time.Millisecond) // A's maxWait is over: its sleep returns
	require.True(t, held.ended.CompareAndSwap(false, true))
	l.endLocked(held, success, l.now(clk.Now()))
	l.mu.Unlock()

	ra := <-a
	require.ErrorIs(t, ra.err, admit.ErrOverloaded, "A's maxWait passed before the permit was free")
	require.Nil(t, ra.p)
	rb := <-b
	require.NoError(t, rb.err, "the permit went to B, within its maxWait")
	rb.p.Success()
	s := l.Stats()
	require.Equal(t, uint64(1), s.Waited, "B only")
	require.Equal(t, uint64(1), s.TimedOut, "A")
	require.Equal(t, uint64(1), s.Shed)
	require.Zero(t, s.InFlight)
	require.Zero(t, s.Waiting)
	require.Equal(t, s.Admitted+s.Waited, s.Successes+s.Drops+s.Ignored)
}
