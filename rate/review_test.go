package rate

import (
	"context"
	"math"
	"math/rand/v2"
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

// A context deadline without a monotonic reading (context.WithDeadline on a
// calendar time, time.Now().UTC().Add(d)) is measured as since measures
// such times: with the wall clock's steps taken off. Otherwise, after the
// wall clock stepped forward by an hour, a wait of 1 s against a deadline
// 100 ms away reads 1 h 100 ms of room and waits, where x/time/rate's
// deadline.Sub(t) reads 100 ms and returns its deadline error at once.
func TestReviewWallStepWaitDeadline(t *testing.T) {
	defer func(f func() int64) { wallStepNow = f; wallStep.Store(0) }(wallStepNow)
	// Only forward: the context's own timer reads the real wall clock, which
	// the test cannot step, so a deadline on a wall clock stepped back would
	// already have passed.
	for _, step := range []time.Duration{time.Hour} {
		wallStepNow = func() int64 {
			return int64(time.Now().Round(0).Sub(epochWall)-time.Since(epoch)) + int64(step)
		}
		now := time.Now().Round(0).Add(step) // what time.Now().UTC() reads after the step
		lim := NewLimiter(1, 1)
		if !lim.AllowN(now, 1) {
			t.Fatal("a full limiter refused")
		}
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(100*time.Millisecond))
		var asked time.Duration = -1
		err := lim.wait(ctx, 1, now, func(d time.Duration) (<-chan time.Time, func() bool, func()) {
			asked = d
			ch := make(chan time.Time, 1)
			ch <- now.Add(d)
			return ch, func() bool { return true }, func() {}
		})
		cancel()
		if err == nil || err.Error() != "rate: Wait(n=1) would exceed context deadline" {
			t.Errorf("wall clock stepped by %v: a wait of 1 s, deadline in 100 ms: err %v (timer asked for %v), want the deadline error", step, err, asked)
		}
		wallStep.Store(0)
	}
}

// seq counts every token reserved, in a uint64: it wraps after 2^64 tokens,
// which a limiter with a huge rate and burst passes in seconds (1e18/s
// refills 2^62 tokens in under 5 s). Cancel must still see a change of the
// limit made after the reservation when seq wrapped between the two, or it
// takes the fixed-rate path and counts later tokens at the new rate: here
// the case of TestCancelAfterLimitChange, "refilled to the burst", with seq
// wrapping at the raise, which let 20 act at one instant on a burst of 10.
func TestReviewCancelSeqWrap(t *testing.T) {
	t0 := time.Now()
	lim := NewLimiter(1e18, math.MaxInt)
	const tail = 1 + 1 + 10 + 10 // SetBurstAt, SetLimitAt, the drain, R
	pump := []int{1 << 62, 1 << 62, 1 << 62, 1<<62 - tail - 1}
	at := t0
	for i, k := range pump {
		if !lim.AllowN(at, k) {
			t.Fatalf("pump %d of %d refused", i, k)
		}
		at = at.Add(10 * time.Second) // refills 1e19 tokens: full
	}
	lim.SetBurstAt(at, 10)
	lim.SetLimitAt(at, 10)
	if !lim.AllowN(at, 10) {
		t.Fatal("drain refused")
	}
	r := lim.ReserveN(at, 10)
	if r.DelayFrom(at) != time.Second {
		t.Fatalf("R delay %v", r.DelayFrom(at))
	}
	if r.seq != math.MaxUint64 {
		t.Fatalf("setup: R's seq %d, want 2^64-1 so that the raise wraps it", r.seq)
	}
	lim.SetLimitAt(at, 1000)
	ms50 := at.Add(50 * time.Millisecond)
	if !lim.AllowN(ms50, 10) {
		t.Fatal("refilled burst refused")
	}
	r.CancelAt(ms50)
	if lim.AllowN(ms50, 1) {
		t.Errorf("after the cancel, %v tokens more at the same instant: more than the burst of 10 at once", 1+lim.TokensAt(ms50))
	}
}

// An explicit time far from now (a corrupted or sentinel timestamp: the
// year 146 billion here) must not make every later implicit-time call slow.
// nowSlow moves the axis to the limiter's far last update, and timeOf found
// that time by adding MaxInt64 ns at a time: 2^29 additions, about 8 s
// under the lock, on every Allow after it (x/time/rate: constant time).
func TestReviewFarTimeAllowFast(t *testing.T) {
	for _, far := range []time.Time{time.Unix(1<<62, 0), time.Unix(-1<<62, 5), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)} {
		lim := NewLimiter(1, 3)
		if !lim.AllowN(far, 1) {
			t.Fatal("a full limiter refused")
		}
		start := time.Now()
		for range 3 {
			lim.Allow()
		}
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Errorf("after AllowN at %v, three Allow calls took %v", far, took)
		}
	}
}

// timeOf gives the time at any offset on the axis exactly, far or near.
func TestReviewTimeOfExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	origins := []time.Time{epoch, time.Unix(1<<61, 123), time.Unix(-1<<61, 999999999), time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i := range 2000 {
		lim := NewLimiter(1, 1)
		o := origins[i%len(origins)]
		if o != epoch {
			lim.axis, lim.base = 1, o
		}
		// A target time a random number of seconds and nanoseconds away,
		// within ±2^60 s.
		sec := rng.Int64N(1<<61) - 1<<60
		target := time.Unix(o.Unix()+sec, rng.Int64N(1e9))
		w := offset(target, lim.origin())
		got := lim.timeOf(w)
		if !got.Equal(target) || offset(got, lim.origin()) != w {
			t.Fatalf("origin %v, target %v: timeOf %v", o, target, got)
		}
	}
}
