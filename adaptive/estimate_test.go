package adaptive

// The no-load estimate and its probes, on explicit windows: no simulator,
// so these run under the race detector too (the simulator's tests,
// overload_test.go and clock_sim_test.go, are built without it).

import (
	"testing"
	"time"
)

// ms is a millisecond in the limiter's nanoseconds.
const ms = int64(time.Millisecond)

// The slower-backend doubt (a run of cuts that lowered the in-flight and
// the throughput but not the latency) is read in the window after a cut,
// not again in a window that held the limit: held windows bring nothing
// new, and enough noisy draws of the same comparison satisfy it by chance.
// One window, read with and without a cut before it.
func TestSlowerDoubtOnlyAfterCut(t *testing.T) {
	for _, tc := range []struct {
		moved int8
		want  bool
	}{{-1, true}, {0, false}, {1, false}} {
		l, err := New()
		if err != nil {
			t.Fatal(err)
		}
		l.base, l.lossless = float64(100*ms), 5
		w := window{
			limit: 12, inflight: 11, latency: float64(160 * ms), successes: 40, saturated: true,
			moved: tc.moved,
			// A fifth below the run's first window in flight and in
			// throughput, the latency nearly where it was, r = 1.6.
			ci: 0.78, cm: 0.95, cx: 0.78,
		}
		if got := l.estimate(&w, true); got != tc.want {
			t.Errorf("moved %d: doubt %v, want %v", tc.moved, got, tc.want)
		}
	}
}

// A probe that reads more than 15% below the estimate (a backend that got
// faster, or one noisy window: a window of 40 lognormal calls can be a
// fifth off) reads a second window at the same limit and sets the estimate
// to the two windows' pooled latency; one that reads more than 15% above
// it sets it at once. Explicit windows through estimate and probe.
func TestProbeConfirmsALowReading(t *testing.T) {
	start := func() *Limiter {
		l, err := New()
		if err != nil {
			t.Fatal(err)
		}
		l.base, l.lossless, l.probes = float64(100*ms), 5, 1
		l.probing, l.probeStep = true, 0
		l.probeFrom, l.probeBase, l.restore = float64(120*ms), float64(100*ms), 12
		return l
	}
	win := func(lat int64) *window {
		return &window{limit: 6, inflight: 5, latency: float64(lat), successes: 40, saturated: true}
	}

	l := start()
	w := win(80 * ms)
	l.estimate(w, true)
	if next := l.probe(w, 6, false); next != 6 || !l.probing {
		t.Fatalf("after a reading 20%% low: next limit %v, probing %v; want the same limit, still probing", next, l.probing)
	}
	w = win(100 * ms)
	l.estimate(w, true)
	if next := l.probe(w, 6, false); l.probing || next <= 6 {
		t.Fatalf("after the second window: next limit %v, probing %v; want the probe over and the limit restored", next, l.probing)
	}
	if l.base != float64(90*ms) {
		t.Errorf("estimate %v after readings of 80 and 100 ms, want their pooled 90ms", time.Duration(l.base))
	}

	l = start()
	w = win(130 * ms)
	l.estimate(w, true)
	if next := l.probe(w, 6, false); l.probing || next <= 6 || l.base != float64(130*ms) {
		t.Errorf("after a reading 30%% high: next limit %v, probing %v, estimate %v; want the probe over and the estimate 130ms",
			next, l.probing, time.Duration(l.base))
	}
}
