//go:build !race

package adaptive

// Clocks that step back or are coarser than the calls, on the simulator
// with fixed seeds; each test asserts counts, limits and shares. Built
// without the race detector, as the simulator is (sim_test.go).

import (
	"fmt"
	"testing"
	"time"
)

// A clock that steps back an hour (a fake clock, a Clock built on the wall
// clock) must not freeze the limiter. Before, every permit taken after the
// step read as "taken before the last change of the limit" (its start was
// an hour before the last update's time), so no window closed for an hour:
// 0 updates in the 90 s after the step, and when the backend doubled its
// workers 10 s later the limit stayed at 11, goodput 0.645 of the new
// capacity. Now the limiter's time goes on from where it was.
func TestClockStepBack(t *testing.T) {
	m := model{name: "fifo/fixed", workers: 8, d: distFixed}
	const back, at = int64(time.Hour), int64(30 * time.Second)
	sc := &scenario{m: m, classes: []classLoad{{factor: 3}}, duration: int64(120 * time.Second), deadline: simDeadline, seed: 1,
		steps: []step{{int64(40 * time.Second), 16, nil}},
		clock: func(now int64) int64 {
			if now >= at {
				return now - back
			}
			return now
		}}
	s := runSim(sc)
	var before int
	for _, u := range s.updates {
		if u.t < at {
			before++
		}
	}
	after := len(s.updates) - before
	me := s.measure(int64(60*time.Second), sc.duration, s.capacity(16))
	t.Logf("%d updates before the step back, %d in the 90 s after; final limit %d; from 60 s against 16 workers: %v", before, after, s.l.Limit(), me)
	if after < 100 {
		t.Errorf("%d updates in the 90 s after the clock stepped back an hour, want >= 100 (as without the step)", after)
	}
	if me.goodput < 0.9 {
		t.Errorf("goodput %.3f of the doubled capacity from 60 s, want >= 0.9", me.goodput)
	}
}

// A coarse clock (Windows' 15.6 ms tick, a 1 ms one) in front of calls
// shorter than its tick: most latencies read 0 and a few a whole tick.
// Before, the fastest 80% of a window read 0 (a window that counts for
// nothing), an estimate was set from the rare window that read a little
// above 0, and every later window that read a tick was a "queue" of 30x:
// the limit was only ever cut, to 4, and at half load 69% of the calls
// were shed. Asserted: target 3 at half load, and at 3x goodput >= 0.9 and
// nothing abandoned. (Latency within target 2 is out of reach: the
// limiter cannot see a queue shorter than the clock's tick; it holds it
// to about 1.5 ticks.)
func TestCoarseClock(t *testing.T) {
	for _, c := range []struct {
		m        model
		grain    int64
		f        float64
		duration time.Duration
	}{
		{model{name: "fifo/fixed 1ms x32", workers: 32, d: fixedDist{ms}}, 15625 * 1000, 0.5, 10 * time.Second},
		{model{name: "fifo/lognormal 1ms x32", workers: 32, d: lognormalDist{ms, 0.5}}, 15625 * 1000, 0.5, 10 * time.Second},
		{model{name: "fifo/fixed 100us x8", workers: 8, d: fixedDist{ms / 10}}, ms, 3, 3 * time.Second},
	} {
		g := c.grain
		sc := &scenario{m: c.m, classes: []classLoad{{factor: c.f}}, duration: int64(c.duration), deadline: simDeadline, seed: 1,
			clock: func(now int64) int64 { return now / g * g }}
		s := runSim(sc)
		me := s.measure(sc.duration/3, sc.duration, s.capacity(c.m.workers))
		name := fmt.Sprintf("%s, clock tick %v, %gx", c.m.name, time.Duration(g), c.f)
		t.Logf("%s: final limit %d, estimate %v; %v", name, s.l.Limit(), time.Duration(s.l.base), me)
		switch {
		case c.f < 1 && me.rejected > 0.005:
			t.Errorf("%s: rejected %.4f, want <= 0.005", name, me.rejected)
		case c.f > 1 && (me.goodput < 0.9 || me.abandoned > 0):
			t.Errorf("%s: goodput %.3f, %d abandoned; want >= 0.9 and none", name, me.goodput, me.abandoned)
		}
	}
}
