package adaptive

import (
	"context"
	"errors"
	"math"
	"math/bits"
)

// waiter is one caller in the backlog. Its fields require Limiter.mu.
type waiter struct {
	prio       Priority
	state      uint8
	start      int64 // when the permit was handed over, if granted
	deadline   int64 // when its maxWait ends, on the limiter's time
	cancel     context.CancelFunc
	prev, next *waiter
}

const (
	waiting uint8 = iota
	waitGranted
	waitShed
	// waitExpired: grant found its maxWait over and took it out of the
	// backlog instead of handing it a permit; it counts itself as it
	// returns (shed, or cancelled if its context ended too).
	waitExpired
)

// waitQueue is a FIFO of waiters, linked through the waiters themselves so
// that one leaving from the middle costs nothing.
type waitQueue struct{ head, tail *waiter }

// enqueue appends w to its priority's queue. Requires mu.
func (l *Limiter) enqueue(w *waiter) {
	i := w.prio.index()
	q := &l.queues[i]
	w.prev, w.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
	l.mask |= 1 << i
	l.nwait++
}

// remove takes w out of its queue. Requires mu and w queued.
func (l *Limiter) remove(w *waiter) {
	i := w.prio.index()
	q := &l.queues[i]
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
	if q.head == nil {
		l.mask &^= 1 << i
	}
	l.nwait--
	if l.nwait == 0 {
		l.lifo = false
	}
}

// lowestBelow returns the waiter of the lowest priority below p that is
// served last (the newest, or while grant serves newest first the oldest,
// the likeliest to miss its deadline), or nil if every waiter's priority
// is p or higher. Requires mu.
func (l *Limiter) lowestBelow(p Priority) *waiter {
	below := l.mask & (1<<p.index() - 1)
	if below == 0 {
		return nil
	}
	q := &l.queues[bits.TrailingZeros8(below)]
	if l.lifo {
		return q.head
	}
	return q.tail
}

// grant hands free permits to waiters, highest priority first, oldest
// first within a priority (newest first while lifo is set: see
// WithBacklog), while the best waiter's threshold allows: if it does not,
// no lower priority's does either. A waiter whose maxWait is over (its
// goroutine woke and waits for mu) is taken out instead, without a
// permit. Requires mu.
func (l *Limiter) grant(now int64) {
	for l.mask != 0 {
		i := bits.Len8(l.mask) - 1
		w := l.queues[i].head
		if l.lifo {
			w = l.queues[i].tail
		}
		if l.inflight >= l.threshold(w.prio) {
			return
		}
		l.remove(w)
		if now >= w.deadline {
			// Its maxWait is over: its sleep has ended or is about to,
			// and the mutex is all that keeps it in the backlog. A permit
			// now would come after maxWait: it goes to the next waiter.
			w.state = waitExpired
			w.cancel()
			continue
		}
		l.advance(now)
		l.inflight++
		// Waited is counted when the waiter takes the permit (wait), not
		// here: one whose context ends first gives it back, and a count
		// that a scrape saw must never go down.
		w.state, w.start = waitGranted, now
		w.cancel()
	}
}

// wait queues the caller, unlocks mu, and sleeps on the limiter's clock
// until it is granted a permit (filled into p), shed, maxWait passes, or
// ctx ends. Requires mu, which it releases.
func (l *Limiter) wait(ctx context.Context, prio Priority, p *Permit, now int64) error {
	// The waiter and its context are the backlog path's allocations: the
	// limiter keeps the waiter in its queue, and the context is how a
	// releaser wakes the sleeper through admit.Clock's Sleep.
	wctx, cancel := context.WithCancel(ctx)
	w := &waiter{prio: prio, cancel: cancel, deadline: now + int64(l.cfg.maxWait)}
	if w.deadline < now {
		w.deadline = math.MaxInt64 // a maxWait of centuries: no end
	}
	l.enqueue(w)
	l.mu.Unlock()

	slept := l.clk.Sleep(wctx, l.cfg.maxWait)
	cancel()
	now = l.clk.Now()

	l.mu.Lock()
	now = l.now(now)
	switch w.state {
	case waitGranted:
		if err := ctx.Err(); err != nil {
			// Granted as ctx ended: as golang.org/x/sync/semaphore does,
			// the caller's context decides. The permit was never used, so
			// it is no outcome: it goes to the next waiter.
			l.advance(now)
			l.inflight--
			l.stats.Cancelled++
			l.grant(now)
			l.inflightA.Store(int64(l.inflight))
			l.mu.Unlock()
			return err
		}
		l.stats.Waited++
		l.inflightA.Store(int64(l.inflight))
		l.mu.Unlock()
		p.l, p.start, p.waited = l, w.start, true
		return nil
	case waitShed:
		// Shed was counted with Displaced.
		err := &OverloadedError{Limit: l.limit, InFlight: l.inflight, Priority: prio, Waited: true}
		l.mu.Unlock()
		return err
	}
	if w.state == waiting {
		l.remove(w)
	}
	// The caller's own context ended, or maxWait passed. Sleep returns the
	// context's error when it ends first; a clock may also return nil at
	// the deadline after ctx ended: ctx decides.
	if err := ctx.Err(); err != nil {
		l.stats.Cancelled++
		l.mu.Unlock()
		return err
	}
	if slept != nil && !errors.Is(slept, context.Canceled) {
		// A clock error other than the wake-up: report it as is.
		l.mu.Unlock()
		return slept
	}
	l.stats.Shed++
	l.stats.TimedOut++
	err := &OverloadedError{Limit: l.limit, InFlight: l.inflight, Priority: prio, Waited: true}
	l.mu.Unlock()
	return err
}
