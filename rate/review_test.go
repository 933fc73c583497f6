package rate

import (
	"testing"
	"time"

	xrate "golang.org/x/time/rate"
)

// After the wall clock stepped (an NTP step, or a resume from suspend, where
// Linux's CLOCK_MONOTONIC stands still and the wall clock does not), a
// reservation made at a time without a monotonic reading must still tell its
// holder, in the holder's own time, how long to wait. since() shifts such a
// time by the step to put it on the monotonic axis; the Reservation's
// timeToAct must not carry that shift, or DelayFrom(t) is off by the step:
// after a resume of 10 s, five reservations at 1/s, burst 1, all report a
// delay of 0 and their holders act at once (x/time/rate: 0, 1, 2, 3, 4 s).
func TestReviewWallStepReservationDelay(t *testing.T) {
	defer func(f func() int64) { wallStepNow = f; wallStep.Store(0) }(wallStepNow)
	for _, step := range []time.Duration{10 * time.Second, -10 * time.Second} {
		wallStepNow = func() int64 {
			return int64(time.Now().Round(0).Sub(epochWall)-time.Since(epoch)) + int64(step)
		}
		lim, x := NewLimiter(1, 1), xrate.NewLimiter(1, 1)
		now := time.Now().Round(0).Add(step) // what time.Now().UTC() reads after the step
		for i := range 5 {
			r, xr := lim.ReserveN(now, 1), x.ReserveN(now, 1)
			if got, want := r.DelayFrom(now), xr.DelayFrom(now); got != want {
				t.Errorf("wall clock stepped by %v: reservation %d: DelayFrom(t) = %v, x/time/rate %v", step, i, got, want)
			}
			if got, want := r.DelayFrom(now), time.Duration(i)*time.Second; got != want {
				t.Errorf("wall clock stepped by %v: reservation %d: DelayFrom(t) = %v, want %v", step, i, got, want)
			}
		}
		wallStep.Store(0)
	}
}
