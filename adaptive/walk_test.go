package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/admit-go/admit/buckettest"
)

// TestBookkeepingWalk is a seeded walk over the limiter's contract on a
// fake clock: callers at random priorities acquire (some with contexts
// already ended, some cancelled while they wait), permits end with each
// outcome and a second time (sometimes concurrently), the clock moves
// within and past maxWait and across windows so that the limit moves,
// and the backlog fills so that higher priorities displace lower ones.
// After every step, once every caller has either returned or sleeps in
// the backlog, it checks against a model of the backlog:
//   - the counters: Admitted+Waited = Successes+Drops+Ignored+InFlight,
//     each a count of what the callers saw; Shed, TimedOut, Displaced and
//     Cancelled likewise; Waiting the callers blocked;
//   - the bound: InFlight above Limit only after a decrease, by no more
//     than was out at it; no caller waits while a permit is free;
//   - the waits: no caller waits past maxWait, none is granted at or after
//     it, a cancelled waiter returns ctx.Err() itself;
//   - the races: a permit released while waiters woken by the clock, or
//     whose context ended, have yet to take the mutex;
//   - the order: the waiters granted are the first of the model's order
//     (highest priority, oldest first or newest while lifo), and a
//     displaced waiter is the one the model names.
//
// ADAPTIVE_WALK_SEEDS=n runs n seeds (default 4).
func TestBookkeepingWalk(t *testing.T) {
	seeds := 4
	if v, err := strconv.Atoi(os.Getenv("ADAPTIVE_WALK_SEEDS")); err == nil && v > 0 {
		seeds = v
	}
	for seed := range uint64(seeds) {
		for _, cfg := range []struct {
			backlog int
			maxWait time.Duration
		}{{0, 0}, {3, 10 * time.Millisecond}, {8, time.Duration(math.MaxInt64)}} {
			t.Run(fmt.Sprintf("seed=%d/backlog=%d", seed, cfg.backlog), func(t *testing.T) {
				walk(t, seed, cfg.backlog, cfg.maxWait, 400)
			})
		}
	}
}

type walkCaller struct {
	seq      int
	prio     Priority
	deadline int64 // on the clock; the clock never steps back here
	cancel   context.CancelFunc
	ctx      context.Context
	done     chan struct{}
	p        *Permit
	err      error
}

func walk(t *testing.T, seed uint64, backlog int, maxWait time.Duration, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0xadad))
	clk := buckettest.NewFakeClock(1e9)
	opts := []Option{WithClock(clk), WithInitialLimit(1 + rng.IntN(6)), WithLimitBounds(1, 12), WithMinSamples(1 + rng.IntN(6))}
	if backlog > 0 {
		opts = append(opts, WithBacklog(backlog, maxWait))
	}
	switch rng.IntN(3) {
	case 1:
		opts = append(opts, WithAlgorithm(AIMD()))
	case 2:
		opts = append(opts, WithAlgorithm(Vegas()))
	}
	l, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	lw := watchLimit(l)
	var (
		seq                                    int
		pending                                []*walkCaller // in arrival order
		held                                   []*Permit
		got, shed, timedOut, displaced, cancel uint64
		ended                                  uint64
		step                                   int
		what                                   string
	)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d step %d (%s): %s", seed, step, what, fmt.Sprintf(format, args...))
	}
	// settle waits until every caller has returned or sleeps in the
	// backlog, and returns those that returned, in no order.
	settle := func() []*walkCaller {
		var back []*walkCaller
		for range 1_000_000 {
			l.mu.Lock()
			nwait := l.nwait
			l.mu.Unlock()
			for i := 0; i < len(pending); i++ {
				select {
				case <-pending[i].done:
					back = append(back, pending[i])
					pending = slices.Delete(pending, i, i+1)
					i--
				default:
				}
			}
			if nwait == len(pending) && clk.Sleepers() == len(pending) {
				l.mu.Lock()
				ok := l.nwait == len(pending)
				l.mu.Unlock()
				if ok {
					return back
				}
			}
			runtime.Gosched()
		}
		fail("never settled: %d pending, %d sleepers", len(pending), clk.Sleepers())
		return nil
	}
	lifoNow := func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.lifo }
	// account checks what returned, and the state: victim is the waiter
	// the model expects displaced (nil: none).
	account := func(back []*walkCaller, victim *walkCaller) {
		now := clk.Now()
		var granted []*walkCaller
		for _, c := range back {
			var oe *OverloadedError
			switch {
			case c.err == nil:
				got++
				held = append(held, c.p)
				if c.p.waited {
					granted = append(granted, c)
					if c.p.start >= c.deadline {
						fail("waiter %d granted at %d, its maxWait ended at %d", c.seq, c.p.start, c.deadline)
					}
				}
			case errors.As(c.err, &oe):
				shed++
				if oe.Waited {
					switch {
					case c == victim:
						displaced++
					case now >= c.deadline:
						timedOut++
					default:
						fail("waiter %d (%v) shed after waiting, neither displaced nor past its maxWait", c.seq, c.prio)
					}
				} else if victim != nil && c == victim {
					fail("victim %d shed without waiting", c.seq)
				}
			case c.err == c.ctx.Err():
				if c.deadline != 0 { // it waited
					cancel++
				}
			default:
				fail("caller %d: %v, not its context's error %v", c.seq, c.err, c.ctx.Err())
			}
		}
		if victim != nil && !slices.Contains(back, victim) {
			fail("waiter %d (%v) should have been displaced", victim.seq, victim.prio)
		}
		// The waiters granted come first in the serving order (highest
		// priority, oldest first or newest while lifo) of those left: a
		// window in the step may have set lifo, and only a non-empty
		// backlog keeps it.
		if len(granted) > 0 && len(pending) > 0 {
			lifo := lifoNow()
			for _, c := range pending {
				for _, g := range granted {
					if c.prio > g.prio || c.prio == g.prio && lifo == (c.seq > g.seq) {
						fail("waiter %d (%v) granted while %d (%v) waits on", g.seq, g.prio, c.seq, c.prio)
					}
				}
			}
		}
		l.mu.Lock()
		s := l.stats
		s.InFlight, s.Waiting, s.Limit = l.inflight, l.nwait, l.limit
		lw.settle()
		ex := lw.excess
		l.mu.Unlock()
		switch {
		case s.InFlight != len(held):
			fail("InFlight %d, callers hold %d", s.InFlight, len(held))
		case s.Waiting != len(pending):
			fail("Waiting %d, callers blocked %d", s.Waiting, len(pending))
		case s.Admitted+s.Waited != got:
			fail("Admitted %d + Waited %d, callers got %d", s.Admitted, s.Waited, got)
		case s.Admitted+s.Waited != s.Successes+s.Drops+s.Ignored+uint64(s.InFlight):
			fail("Admitted+Waited %d != ended %d + in flight %d", s.Admitted+s.Waited, s.Successes+s.Drops+s.Ignored, s.InFlight)
		case s.Successes+s.Drops+s.Ignored != ended:
			fail("ended %d, counted %d", ended, s.Successes+s.Drops+s.Ignored)
		case s.Shed != shed || s.TimedOut != timedOut || s.Displaced != displaced || s.Cancelled != cancel:
			fail("Shed/TimedOut/Displaced/Cancelled %d/%d/%d/%d, callers saw %d/%d/%d/%d", s.Shed, s.TimedOut, s.Displaced, s.Cancelled, shed, timedOut, displaced, cancel)
		case s.Waiting > 0 && s.InFlight < s.Limit:
			fail("%d wait while %d of %d permits are out", s.Waiting, s.InFlight, s.Limit)
		case s.InFlight > max(s.Limit, ex):
			fail("in flight %d above limit %d and the %d out at the last decrease", s.InFlight, s.Limit, ex)
		case int64(s.InFlight) != l.inflightA.Load() || int64(s.Limit) != l.limitA.Load():
			fail("mirrors disagree")
		}
		for _, c := range pending {
			if now >= c.deadline {
				fail("waiter %d waits past its maxWait (%d >= %d)", c.seq, now, c.deadline)
			}
		}
	}
	bg := context.Background()
	for step = range steps {
		var victim *walkCaller
		switch r := rng.IntN(20); {
		case r < 8: // acquire
			what = "acquire"
			prio := Priority(rng.IntN(5) - 2)
			c := &walkCaller{seq: seq, prio: prio, done: make(chan struct{})}
			seq++
			c.ctx, c.cancel = context.WithCancel(ContextWithPriority(bg, prio))
			if rng.IntN(15) == 0 {
				what = "acquire, context ended"
				c.cancel()
			}
			l.mu.Lock()
			full := backlog > 0 && l.nwait >= backlog
			wouldWait := backlog > 0 && (l.inflight >= l.limit || l.mask>>prio.index() != 0)
			lifo := l.lifo
			l.mu.Unlock()
			if c.ctx.Err() == nil && wouldWait {
				c.deadline = clk.Now() + int64(maxWait)
				if c.deadline < 0 {
					c.deadline = math.MaxInt64
				}
				if full {
					// lowest priority below prio, served last
					for _, w := range pending {
						if w.prio >= prio || victim != nil && w.prio > victim.prio {
							continue
						}
						if victim == nil || w.prio < victim.prio || lifo != (w.seq > victim.seq) {
							victim = w
						}
					}
				}
			}
			pending = append(pending, c)
			go func() { defer close(c.done); c.p, c.err = l.Acquire(c.ctx) }()
		case r < 14 && len(held) > 0: // end a permit, maybe twice
			what = "end"
			i := rng.IntN(len(held))
			p := held[i]
			held = slices.Delete(held, i, i+1)
			ends := []func(){p.Success, p.Success, p.Success, p.Dropped, p.Ignore}
			a, b := ends[rng.IntN(len(ends))], ends[rng.IntN(len(ends))]
			switch rng.IntN(3) {
			case 0:
				a()
			case 1:
				a()
				b()
			default:
				both := make(chan struct{})
				go func() { a(); close(both) }()
				b()
				<-both
			}
			ended++
		case r < 15 && len(held) > 0: // a release in a waiter's gap
			// Under the mutex, the clock moves (waking the waiters whose
			// maxWait it passes) or a waiter's context ends, and then a
			// permit ends: the release lands before those waiters take
			// the mutex to leave the backlog.
			i := rng.IntN(len(held))
			p := held[i]
			held = slices.Delete(held, i, i+1)
			l.mu.Lock()
			if len(pending) > 0 && rng.IntN(2) == 0 {
				what = "cancel a waiter, then a release"
				pending[rng.IntN(len(pending))].cancel()
			} else {
				what = "advance, then a release"
				clk.Advance(time.Duration(rng.IntN(int(20 * time.Millisecond))))
			}
			if !p.ended.CompareAndSwap(false, true) {
				l.mu.Unlock()
				fail("a permit held was ended")
			}
			l.endLocked(p, outcome(rng.IntN(3)), l.now(clk.Now()))
			l.mu.Unlock()
			ended++
		case r < 16 && len(pending) > 0: // a waiter's context ends
			what = "cancel a waiter"
			c := pending[rng.IntN(len(pending))]
			c.cancel()
			<-c.done
			if c.err != context.Canceled {
				fail("waiter %d whose context ended got %v", c.seq, c.err)
			}
		default: // the clock moves
			what = "advance"
			d := time.Duration(rng.IntN(int(2 * time.Millisecond)))
			if rng.IntN(4) == 0 {
				d = time.Duration(rng.IntN(int(30 * time.Millisecond)))
			}
			clk.Advance(d)
		}
		account(settle(), victim)
	}
	// Wind down: end everything, cancel the rest.
	for _, c := range pending {
		c.cancel()
	}
	for _, p := range held {
		p.Ignore()
	}
	for _, c := range pending {
		<-c.done
		if c.p != nil {
			c.p.Ignore()
		}
	}
	s := l.Stats()
	if s.InFlight != 0 || s.Waiting != 0 || s.Admitted+s.Waited != s.Successes+s.Drops+s.Ignored {
		t.Fatalf("after the walk: %+v", s)
	}
	t.Logf("%+v; %d decreases, %d increases", s, lw.decreases, lw.increases)
}
