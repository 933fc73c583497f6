package adaptive

// Edge cases from an adversarial review: clocks that step back or are
// coarse, a bimodal backend at light load, a backlog whose wait outlasts
// the callers' deadlines, Vegas after a backend gets slower. Each runs the
// simulator on fixed seeds; each asserts counts, limits and shares.

import (
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
func TestReviewClockStepBack(t *testing.T) {
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
