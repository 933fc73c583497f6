package buckettest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/admit-go/admit"
)

// Waiters drives blocking AcquireN calls on a limiter that sleeps on a
// FakeClock, one goroutine each, and records when each one is admitted. A
// caller that had to wait counts as admitted at its wake time, the deadline
// it slept until; one that did not wait, at the clock's reading when it
// started. Every method returns only once the goroutines it affects have
// settled (asleep on the clock, or returned), so a test that interleaves
// Start, Cancel, Advance and TryAcquireN on one goroutine is deterministic,
// without sleeps or polling. It expects the limiter to sleep at most once per
// AcquireN, as the buckets of this module do.
//
// The zero value is not usable; create one with NewWaiters. Waiters is not
// safe for concurrent use; call Close before the test ends.
type Waiters struct {
	l   admit.Limiter
	clk *FakeClock
	all []*waiter
}

// waiter is one AcquireN call.
type waiter struct {
	mu      sync.Mutex // guards until and slept, written by the clock's Sleep
	n       int64
	started int64
	cancel  context.CancelFunc
	settled chan struct{} // closed when asleep or done, whichever is first
	once    sync.Once
	done    chan struct{} // closed when AcquireN has returned
	err     error         // AcquireN's result; read after done
	until   int64         // the wake time it slept until
	slept   bool
	deaf    bool // the clock does not wake it; immutable
}

// waiterKey carries a *waiter in the context the limiter passes to Sleep.
type waiterKey struct{}

func (w *waiter) asleep(until int64) {
	w.mu.Lock()
	w.until, w.slept = until, true
	w.mu.Unlock()
	w.once.Do(func() { close(w.settled) })
}

// NewWaiters returns a Waiters for l, which must sleep on clk.
func NewWaiters(l admit.Limiter, clk *FakeClock) *Waiters { return &Waiters{l: l, clk: clk} }

// Start calls AcquireN(ctx, n) in a new goroutine and returns its index once
// it is asleep on the clock or has returned.
func (ws *Waiters) Start(n int64) int { return ws.start(context.Background(), n, false) }

// start is Start with a parent context (Walk's deadlines). A deaf waiter's
// sleep does not end when the clock reaches its wake, only when its context
// ends: Walk cancels it after its wake, the race in which a waiter whose
// tokens have come due gives up, deterministically.
func (ws *Waiters) start(parent context.Context, n int64, deaf bool) int {
	ctx, cancel := context.WithCancel(parent)
	w := &waiter{n: n, started: ws.clk.Now(), cancel: cancel, settled: make(chan struct{}), done: make(chan struct{}), deaf: deaf}
	ctx = context.WithValue(ctx, waiterKey{}, w)
	ws.all = append(ws.all, w)
	go func() {
		w.err = ws.l.AcquireN(ctx, n)
		close(w.done)
		w.once.Do(func() { close(w.settled) })
	}()
	<-w.settled
	return len(ws.all) - 1
}

// Cancel cancels waiter i's context and waits until its AcquireN returns.
func (ws *Waiters) Cancel(i int) {
	ws.CancelAsync(i)
	<-ws.all[i].done
}

// CancelAsync cancels waiter i's context without waiting for it; Wait does.
func (ws *Waiters) CancelAsync(i int) { ws.all[i].cancel() }

// Wait blocks until waiter i's AcquireN has returned and returns its error.
func (ws *Waiters) Wait(i int) error {
	<-ws.all[i].done
	return ws.all[i].err
}

// Advance moves the clock by d and waits until every waiter whose wake time
// it reached has returned.
func (ws *Waiters) Advance(d time.Duration) {
	ws.clk.Advance(d)
	now := ws.clk.Now()
	for _, w := range ws.all {
		if until, slept := w.wake(); slept && until <= now && !w.deaf {
			<-w.done
		}
	}
}

// Pending returns the indices of the waiters that are still asleep.
func (ws *Waiters) Pending() []int {
	var p []int
	for i, w := range ws.all {
		select {
		case <-w.done:
		default:
			p = append(p, i)
		}
	}
	return p
}

// Result returns waiter i's error and whether it has returned.
func (ws *Waiters) Result(i int) (err error, returned bool) {
	select {
	case <-ws.all[i].done:
		return ws.all[i].err, true
	default:
		return nil, false
	}
}

// Admissions returns one Admission per waiter whose AcquireN returned nil,
// at its wake time (or its start, if it did not sleep).
func (ws *Waiters) Admissions() []Admission {
	var a []Admission
	for _, w := range ws.all {
		select {
		case <-w.done:
		default:
			continue
		}
		if w.err != nil || w.n == 0 {
			continue
		}
		at := w.started
		if until, slept := w.wake(); slept {
			at = until
		}
		a = append(a, Admission{At: at, N: w.n})
	}
	return a
}

// WakeTime returns the deadline waiter i slept until, and false if it never
// slept.
func (ws *Waiters) WakeTime(i int) (int64, bool) {
	w := ws.all[i]
	<-w.settled
	return w.wake()
}

func (w *waiter) wake() (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.until, w.slept
}

// Close cancels every waiter still asleep and waits for all of them.
func (ws *Waiters) Close() {
	for _, w := range ws.all {
		w.cancel()
	}
	for _, w := range ws.all {
		<-w.done
	}
}

// String lists the waiters' states, for failure messages.
func (ws *Waiters) String() string {
	s := ""
	for i, w := range ws.all {
		err, ret := ws.Result(i)
		until, slept := w.wake()
		s += fmt.Sprintf("[%d n=%d start=%d slept=%v until=%d returned=%v err=%v] ", i, w.n, w.started, slept, until, ret, err)
	}
	return s
}
