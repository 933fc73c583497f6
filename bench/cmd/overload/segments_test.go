package main

import (
	"testing"
	"time"
)

// TestPct checks the nearest rank: the p99 of 200 latencies is the 198th
// smallest, of 100 the 99th, of fewer than 100 the largest.
func TestPct(t *testing.T) {
	var xs []time.Duration
	for i := 200; i >= 1; i-- {
		xs = append(xs, time.Duration(i))
	}
	for _, tc := range []struct {
		n    int
		q    float64
		want time.Duration
	}{
		{200, 0.99, 198}, {200, 0.5, 100}, {100, 0.99, 99}, {99, 0.99, 99}, {20, 0.99, 20}, {1, 0.5, 1},
	} {
		if got := pct(xs[200-tc.n:], tc.q); got != tc.want {
			t.Errorf("pct of 1..%d at %v = %d, want %d", tc.n, tc.q, got, tc.want)
		}
	}
	if got := pct(nil, 0.99); got != 0 {
		t.Errorf("pct of none = %d, want 0", got)
	}
}

// TestSegments checks that segments bins by time: requests by the tick
// they were sent in, the limit by when it was sampled, so that a sample the
// ticker dropped shifts no later one, and a sample a little after a
// second's end still closes that second.
func TestSegments(t *testing.T) {
	r := run{dur: 3 * time.Second, byTick: map[int][]time.Duration{}}
	for k := range 30 { // one request per tick, latency k ms; tick 25 timed out
		r.byTick[k] = []time.Duration{time.Duration(k) * time.Millisecond}
	}
	r.byTick[25] = []time.Duration{timedOut}
	r.byTick[31] = []time.Duration{time.Millisecond} // sent after the run: no stretch
	for k := 1; k <= 33; k++ {
		if k == 4 || k == 5 || k == 19 {
			continue // dropped by the ticker
		}
		r.series = append(r.series, sample{t: time.Duration(k)*tick + 3*time.Millisecond, limit: 100 - k})
	}
	segs := segments(r, time.Second)
	if len(segs) != 3 {
		t.Fatalf("%d stretches of 1 s in 3 s, want 3", len(segs))
	}
	for i, want := range []struct {
		good, n      int
		p99          time.Duration
		lowest, last int
	}{
		{10, 10, 9 * time.Millisecond, 90, 90},
		{10, 10, 19 * time.Millisecond, 80, 80},
		{9, 10, timedOut, 70, 70},
	} {
		sg := segs[i]
		if sg.good != want.good || len(sg.lat) != want.n || pct(sg.lat, 0.99) != want.p99 || !sg.sampled || sg.lowest != want.lowest || sg.last != want.last {
			t.Errorf("second %d: good %d of %d, p99 %v, limit lowest %d last %d; want good %d of %d, p99 %v, lowest %d last %d",
				i, sg.good, len(sg.lat), pct(sg.lat, 0.99), sg.lowest, sg.last, want.good, want.n, want.p99, want.lowest, want.last)
		}
	}
	if got := segments(run{dur: time.Second}, time.Second)[0].limit(0); got != "-" {
		t.Errorf("a stretch without samples prints its limit as %q, want -", got)
	}
}
