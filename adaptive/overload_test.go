//go:build !race

package adaptive

// The targets of the overload simulation, each a test. Every run is
// deterministic: fixed seeds, virtual time. The numbers each test measured
// are logged (go test -v -run Target).

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"testing"
	"time"
)

const (
	simDuration = int64(60 * time.Second)
	simWarmup   = int64(10 * time.Second) // measurements start here
	simDeadline = int64(time.Second)
)

// simModels are the backends of the targets: eight workers serving FIFO
// with a fixed, a lognormal and a heavy-tailed mixed service time, and
// processor sharing (eight workers' worth of capacity shared by every job
// in service) with fixed and lognormal work. No backend cancels work whose
// caller gave up.
var simModels = []model{
	{name: "fifo/fixed", workers: 8, d: distFixed},
	{name: "fifo/lognormal", workers: 8, d: distLognormal},
	{name: "fifo/mix", workers: 8, d: distMix},
	{name: "ps/fixed", ps: true, workers: 8, d: distFixed},
	{name: "ps/lognormal", ps: true, workers: 8, d: distLognormal},
}

// loadSeeds are the seeds each load of targets 1 to 3 runs with, and
// simSeeds those of the slower scenarios (targets 5, the latency step).
// Targets 1 to 3 hold for every one of twelve; docs/adaptive.md says how
// many of twelve the others hold for.
var (
	loadSeeds = []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	simSeeds  = []uint64{1, 2, 3}
	// simSeedsAll runs every part of the slower scenarios on every seed
	// (some run on the first alone by default).
	simSeedsAll bool
)

// ADAPTIVE_SIM_SEEDS=n runs the slower scenarios on seeds 1 to n, every
// part of them on every seed: docs/adaptive.md's "Over twelve seeds" is
// ADAPTIVE_SIM_SEEDS=12 go test -run 'Target5Priorities|LatencyStep'.
// Some of those runs miss (the docs name them): it is for measuring, and
// CI leaves it unset.
func init() {
	v := os.Getenv("ADAPTIVE_SIM_SEEDS")
	if v == "" {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		panic(fmt.Sprintf("ADAPTIVE_SIM_SEEDS=%q: want a positive count of seeds", v))
	}
	simSeeds = nil
	for i := 1; i <= n; i++ {
		simSeeds = append(simSeeds, uint64(i))
	}
	simSeedsAll = true
}

var (
	backlogN    = 64
	backlogWait = 0.4 // of the deadline
)

type runKey struct {
	model   string
	factor  float64
	seed    uint64
	noLimit bool
}

// runs caches the default-option and no-limiter runs that several targets
// measure. Tests in this package do not run in parallel.
var runs = map[runKey]metrics{}

// cachedLoad is load with the defaults, run once per model, load and seed.
func cachedLoad(m model, factor float64, seed uint64) metrics {
	k := runKey{m.name, factor, seed, false}
	if me, ok := runs[k]; ok {
		return me
	}
	_, me := load(m, factor, seed)
	runs[k] = me
	return me
}

func load(m model, factor float64, seed uint64, opts ...Option) (*sim, metrics) {
	sc := &scenario{m: m, classes: []classLoad{{factor: factor}}, duration: simDuration, deadline: simDeadline, seed: seed, opts: opts}
	s := runSim(sc)
	return s, s.measure(simWarmup, simDuration, s.capacity(m.workers))
}

func noLimit(m model, factor float64, seed uint64) metrics {
	k := runKey{m.name, factor, seed, true}
	if me, ok := runs[k]; ok {
		return me
	}
	me := noLimitRun(m, factor, seed)
	runs[k] = me
	return me
}

func noLimitRun(m model, factor float64, seed uint64) metrics {
	sc := &scenario{m: m, classes: []classLoad{{factor: factor}}, duration: simDuration, deadline: simDeadline, seed: seed, noLimit: true}
	s := runSim(sc)
	return s.measure(simWarmup, simDuration, s.capacity(m.workers))
}

// eachOverload runs check on the default-option run of every model at
// 2×, 3× and 5× for every seed, in a subtest per model and load; after
// runs once per subtest.
func eachOverload(t *testing.T, check func(t *testing.T, seed uint64, me metrics), after func(t *testing.T, m model, f float64)) {
	for _, m := range simModels {
		for _, f := range []float64{2, 3, 5} {
			t.Run(fmt.Sprintf("model=%s/load=%gx", m.name, f), func(t *testing.T) {
				for _, seed := range loadSeeds {
					me := cachedLoad(m, f, seed)
					t.Logf("seed %d: %v", seed, me)
					check(t, seed, me)
				}
				if after != nil {
					after(t, m, f)
				}
			})
		}
	}
}

// Target 1: goodput at least 90% of capacity at 2× to 5× offered load, on
// every backend model, with the defaults. Without a limiter the same loads
// collapse (checked too, so that the scenario is known to be hard).
func TestTarget1Goodput(t *testing.T) {
	eachOverload(t, func(t *testing.T, seed uint64, me metrics) {
		if me.goodput < 0.90 {
			t.Errorf("seed %d: goodput %.3f of capacity, want >= 0.90", seed, me.goodput)
		}
	}, func(t *testing.T, m model, f float64) {
		base := noLimit(m, f, loadSeeds[0])
		t.Logf("no limiter: %v", base)
		if base.goodput > 0.5 {
			t.Errorf("without a limiter goodput is %.3f: the scenario does not overload", base.goodput)
		}
	})
}

// Target 2: admitted p99 at most 2.5× and p50 at most 2× the no-load p99
// and p50, at 2× to 5×, on every backend model. A request admitted and
// then abandoned at its deadline counts as infinitely slow.
func TestTarget2Latency(t *testing.T) {
	eachOverload(t, func(t *testing.T, seed uint64, me metrics) {
		if me.p99 > 2.5 || me.p50 > 2 {
			t.Errorf("seed %d: p50 %.2fx p99 %.2fx of no-load, want <= 2x and <= 2.5x", seed, me.p50, me.p99)
		}
	}, nil)
}

// Target 3: at half the capacity at most 0.5% rejected, and p99 within
// 1.2× of the same run without a limiter.
func TestTarget3LightLoad(t *testing.T) {
	for _, m := range simModels {
		t.Run("model="+m.name, func(t *testing.T) {
			for _, seed := range loadSeeds {
				me := cachedLoad(m, 0.5, seed)
				base := noLimit(m, 0.5, seed)
				t.Logf("seed %d: %v; no limiter p99 %v", seed, me, time.Duration(base.rawP99).Round(time.Millisecond))
				if me.rejected > 0.005 {
					t.Errorf("seed %d: rejected %.4f, want <= 0.005", seed, me.rejected)
				}
				if me.rawP99 > 1.2*base.rawP99 {
					t.Errorf("seed %d: p99 %v, more than 1.2x the %v without a limiter", seed, time.Duration(me.rawP99), time.Duration(base.rawP99))
				}
			}
		})
	}
}

// updatesAfter returns the time of the n-th limit update after t, or -1.
func (s *sim) updatesAfter(t int64, n int) int64 {
	for _, u := range s.updates {
		if u.t > t {
			n--
			if n == 0 {
				return u.t
			}
		}
	}
	return -1
}

// Target 4: after the capacity halves (8 workers to 4) and after it comes
// back, the limiter is within targets 1 and 2 from its 10th update window
// on, measured against the capacity of the moment. The offered load is 2×
// the full capacity throughout: 4× the halved one.
func TestTarget4CapacityStep(t *testing.T) {
	const stepDown, stepUp, end = int64(40 * time.Second), int64(80 * time.Second), int64(120 * time.Second)
	for _, m := range simModels {
		t.Run("model="+m.name, func(t *testing.T) {
			sc := &scenario{m: m, classes: []classLoad{{factor: 2}}, duration: end, deadline: simDeadline, seed: 1,
				steps: []step{{stepDown, m.workers / 2, nil}, {stepUp, m.workers, nil}}}
			s := runSim(sc)
			for _, ph := range []struct {
				name     string
				from, to int64
				workers  int
			}{{"down", stepDown, stepUp, m.workers / 2}, {"up", stepUp, end, m.workers}} {
				// The first window from whose end on the phase meets the
				// targets: the time to converge.
				within := func(k int) (int64, metrics, bool) {
					tk := s.updatesAfter(ph.from, k)
					if tk < 0 || tk >= ph.to {
						t.Fatalf("%s: fewer than %d updates in the phase", ph.name, k)
					}
					me := s.measure(tk, ph.to, s.capacity(ph.workers))
					return tk, me, me.goodput >= 0.90 && me.p50 <= 2 && me.p99 <= 2.5
				}
				k := 1
				for ; k < 10; k++ {
					if _, _, ok := within(k); ok {
						break
					}
				}
				tk, me, ok := within(k)
				t.Logf("step %s to %d workers: within targets from window %d on (%v after the step): %v",
					ph.name, ph.workers, k, time.Duration(tk-ph.from).Round(time.Millisecond), me)
				if !ok {
					t.Errorf("step %s: goodput %.3f p50 %.2fx p99 %.2fx after 10 windows, want >= 0.90, <= 2x, <= 2.5x",
						ph.name, me.goodput, me.p50, me.p99)
				}
			}
		})
	}
}

// Target 5: two priorities, High and Low, each offering the capacity, in
// front of a backlog of 64 whose callers wait at most 40% of their
// deadline (so that the mix's 500 ms calls still finish in time after the
// longest wait).
//
// (a) The high class gets at least 95% of its demand done within its
// deadline, with its admitted latency (from admission: see metrics)
// within target 2. Its wait in the backlog is logged apart; measured from
// arrival the target is out of any scheduler's reach for a class offering
// exactly the capacity (TestTarget5ArrivalLatencyBound).
//
// (b) The low class gets at least 80% of what the high class leaves: of
// the backend's worker time in the measured span, less what high's
// admitted requests took (done in time or not), low's requests done in
// time took at least 80%. Counted in worker time rather than in requests,
// so that the randomness of service times (a few dozen requests either
// way over the span) does not swamp a remainder of 1-4% of the capacity.
//
// (c) At 0.5× + 0.5×, the whole capacity, "nobody is shed" holds only by
// chance: a Poisson load at exactly the capacity is a critically loaded
// queue, its backlog a driftless random walk, so any bound on the wait
// loses a share of the calls, and a longer bound only wastes work on calls
// that then miss their deadline. Asserted instead: no high call is shed
// and none of its demand lost, and the whole loss is at most twice (plus
// half a percent of the demand) that of the same backlog in front of a
// limit fixed at the backend's true capacity, the best any limit can do
// with this backlog. At 0.25× + 0.25× nobody is shed.
func TestTarget5Priorities(t *testing.T) {
	opts := []Option{WithBacklog(backlogN, time.Duration(backlogWait*float64(simDeadline)))}
	for _, m := range simModels {
		t.Run("model="+m.name, func(t *testing.T) {
			for _, seed := range simSeeds {
				sc := &scenario{m: m, classes: []classLoad{{factor: 1, prio: High}, {factor: 1, prio: Low}}, duration: simDuration, deadline: simDeadline,
					seed: seed, opts: opts, workFrom: simWarmup, workTo: simDuration}
				s := runSim(sc)
				capacity := s.capacity(m.workers)
				hi := s.measure(simWarmup, simDuration, capacity, 0)
				lo := s.measure(simWarmup, simDuration, capacity, 1)
				var hiWork, loWork int64
				for _, r := range s.reqs {
					switch {
					case r.class == 0:
						hiWork += r.work
					case r.state == reqDone:
						loWork += r.work
					}
				}
				all := int64(m.workers) * (simDuration - simWarmup)
				hiShare := float64(hi.good) / float64(hi.offered)
				t.Logf("seed %d 1x+1x: high %v", seed, hi)
				t.Logf("seed %d 1x+1x: low  %v", seed, lo)
				t.Logf("seed %d 1x+1x: high got %.4f of its demand and took %.4f of the workers' time; low took %.4f of what was left",
					seed, hiShare, float64(hiWork)/float64(all), float64(loWork)/float64(all-hiWork))
				if hiShare < 0.95 || hi.p50 > 2 || hi.p99 > 2.5 {
					t.Errorf("seed %d 1x+1x: high got %.4f of its demand, admitted p50 %.2fx p99 %.2fx; want >= 0.95, <= 2x, <= 2.5x", seed, hiShare, hi.p50, hi.p99)
				}
				if float64(loWork) < 0.8*float64(all-hiWork) {
					t.Errorf("seed %d 1x+1x: low took %v of the %v of worker time high left, want >= 80%%", seed, time.Duration(loWork), time.Duration(all-hiWork))
				}

				if seed != simSeeds[0] && !simSeedsAll {
					continue // the rest, once: a backlog's runs are slow under -race
				}
				half := func(f float64, opts ...Option) (hi, lo metrics) {
					sc := &scenario{m: m, classes: []classLoad{{factor: f, prio: High}, {factor: f, prio: Low}}, duration: simDuration, deadline: simDeadline, seed: seed, opts: opts}
					s := runSim(sc)
					return s.measure(simWarmup, simDuration, capacity, 0), s.measure(simWarmup, simDuration, capacity, 1)
				}
				lost := func(hi, lo metrics) float64 {
					return float64(hi.offered-hi.good+lo.offered-lo.good) / float64(hi.offered+lo.offered)
				}
				hi, lo = half(0.5, opts...)
				ohi, olo := half(0.5, append(opts, WithLimitBounds(m.workers, m.workers), WithInitialLimit(m.workers))...)
				t.Logf("seed %d 0.5x+0.5x: high %v (shed %d)", seed, hi, hi.shed+hi.expired)
				t.Logf("seed %d 0.5x+0.5x: low  %v (shed %d)", seed, lo, lo.shed+lo.expired)
				t.Logf("seed %d 0.5x+0.5x: lost %.4f of the demand; with the limit fixed at the %d workers %.4f", seed, lost(hi, lo), m.workers, lost(ohi, olo))
				if hi.shed+hi.expired > 0 || hi.good < hi.offered || lost(hi, lo) > 2*lost(ohi, olo)+0.005 {
					t.Errorf("seed %d 0.5x+0.5x: high shed %d, %d of %d done; lost %.4f of all, want no high call shed or lost and <= 2 x %.4f + 0.005",
						seed, hi.shed+hi.expired, hi.good, hi.offered, lost(hi, lo), lost(ohi, olo))
				}
				hi, lo = half(0.25, opts...)
				if n := hi.shed + hi.expired + lo.shed + lo.expired; n > 0 {
					t.Errorf("seed %d 0.25x+0.25x: %d shed, want none", seed, n)
				}
			}
		})
	}
}

// The high class of target 5, measured from its arrival instead of its
// admission, its wait in the backlog included: then the target is out of
// any scheduler's reach for the mix, and at its edge for the others. This
// test is the argument, run: the high class alone at 1×, no low class
// competing, served FIFO with a waiting room of b calls (an arrival that
// finds it full is refused), for b from 4 to 16, over 170 s: the best
// share served with a latency from arrival within target 2. For the mix no
// b reaches 95% (92.0% at best, b = 8): a p50 within 2× of 40 ms allows
// about four calls of queue, and a critically loaded queue that short
// refuses 8%. For fixed service the best is 95.7% (b = 11: a p99 within
// 2.5× of 100 ms allows 150 ms of wait), for lognormal 96.1% (b = 14).
// A low class competing only adds work ahead of the high calls.
func TestTarget5ArrivalLatencyBound(t *testing.T) {
	for _, m := range simModels[:3] {
		best, bestB := 0.0, 0
		for b := 4; b <= 16; b++ {
			o := m
			o.maxQueue = b
			var served, offered int
			var e2e []float64
			for _, seed := range simSeeds[:1] {
				s := runSim(&scenario{m: o, classes: []classLoad{{factor: 1}}, duration: 3 * simDuration, deadline: simDeadline, seed: seed, noLimit: true})
				for _, r := range s.reqs {
					if r.arrive < simWarmup || r.arrive >= 3*simDuration {
						continue
					}
					offered++
					if r.state == reqDone {
						served++
						e2e = append(e2e, float64(r.done-r.arrive))
					}
				}
			}
			_, p50, p99 := noLoad(m.d)
			p50x, p99x := pct(e2e, 0.50)/p50, pct(e2e, 0.99)/p99
			share := float64(served) / float64(offered)
			if p50x <= 2 && p99x <= 2.5 && share > best {
				best, bestB = share, b
			}
		}
		t.Logf("%s: the best share within target 2 from arrival: %.4f, with room for %d", m.name, best, bestB)
		if m.name == "fifo/mix" && best >= 0.95 {
			t.Errorf("%s: a FIFO queue of %d serves %.4f of a 1x class within target 2 from arrival; the docs say no queue can", m.name, bestB, best)
		}
	}
}

// A backend that genuinely gets slower during a sustained overload: at 3×
// its capacity, its service time doubles (its no-load latency with it; its
// capacity halves, so the load becomes 6×). An estimate of the no-load
// latency that cannot rise reads the slower calls as a queue and cuts the
// limit until nearly everything is shed. And the reverse, a backend that
// gets twice as fast: an estimate that cannot fall reads a queue as no
// load and lets it build. From the 10th update window after the step on,
// the estimate is within 15% of the new backend's no-load latency (the
// mean of its fastest trimQ, what a window measures) and the run is within
// targets 1 and 2 against the new backend. The deadline is 2 s so that the
// slower mix's 1 s calls can finish at all. The slower backend runs with
// seeds 1 to 3, the faster with seed 1: over seeds 1 to 6 the estimate of
// a slower backend was within 15% by the 6th window in all 30 runs; of a
// faster one by the 6th in 28, and in two (lognormal work, FIFO and
// processor sharing) only after about 60 windows, when the periodic probe
// or two windows reading below 0.9 of it caught it (docs/adaptive.md).
func TestLatencyStep(t *testing.T) {
	const at, end = int64(30 * time.Second), int64(60 * time.Second)
	for _, dir := range []string{"slower", "faster"} {
		for _, m := range simModels {
			t.Run(fmt.Sprintf("%s/model=%s", dir, m.name), func(t *testing.T) {
				after := scaled(m.d, 2)
				if dir == "faster" {
					m.d, after = after, m.d
				}
				seeds := simSeeds
				if dir == "faster" && !simSeedsAll {
					seeds = simSeeds[:1]
				}
				for _, seed := range seeds {
					sc := &scenario{m: m, classes: []classLoad{{factor: 3}}, duration: end, deadline: 2 * simDeadline, seed: seed,
						steps: []step{{at, m.workers, after}}}
					s := runSim(sc)
					k10 := s.updatesAfter(at, 10)
					if k10 < 0 {
						t.Fatalf("seed %d: fewer than 10 windows after the step", seed)
					}
					want := noLoadLower(after)
					lo, hi := math.Inf(1), 0.0
					for _, u := range s.updates {
						if u.t >= k10 {
							lo, hi = math.Min(lo, u.base), math.Max(hi, u.base)
						}
					}
					mean, p50, p99 := noLoad(after)
					me := s.measure(k10, end, float64(m.workers)/mean)
					me.p50, me.p99 = me.rawP50/p50, me.rawP99/p99
					t.Logf("seed %d: from window 10 (%v after the step): no-load estimate in [%v, %v], the new backend's %v; %v", seed,
						time.Duration(k10-at).Round(time.Millisecond), time.Duration(lo).Round(time.Millisecond), time.Duration(hi).Round(time.Millisecond),
						time.Duration(want).Round(time.Millisecond), me)
					if lo < 0.85*want || hi > 1.15*want {
						t.Errorf("seed %d: no-load estimate in [%v, %v] from window 10, want within 15%% of %v", seed, time.Duration(lo), time.Duration(hi), time.Duration(want))
					}
					if me.goodput < 0.9 || me.p50 > 2 || me.p99 > 2.5 {
						t.Errorf("seed %d: goodput %.3f p50 %.2fx p99 %.2fx from window 10, want >= 0.9, <= 2x, <= 2.5x", seed, me.goodput, me.p50, me.p99)
					}
				}
			})
		}
	}
}

// Callers that go away on their own (a closed tab, a cancelled batch job)
// end their permits Dropped like a timeout: the middleware cannot tell
// them apart. Up to a few percent of such drops, unrelated to load, must
// not drive the limit down: with 2% of the callers leaving at a random
// moment of their call, half load still rejects at most 0.5% (target 3)
// and 3× load stays within targets 1 and 2.
func TestUnrelatedDrops(t *testing.T) {
	for _, m := range simModels {
		for _, f := range []float64{0.5, 3} {
			sc := &scenario{m: m, classes: []classLoad{{factor: f}}, duration: simDuration, deadline: simDeadline, seed: 1, noise: 0.02}
			s := runSim(sc)
			me := s.measure(simWarmup, simDuration, s.capacity(m.workers))
			t.Logf("%s %gx: %d callers left; %v", m.name, f, me.left, me)
			switch {
			case f < 1 && me.rejected > 0.005:
				t.Errorf("%s %gx: rejected %.4f, want <= 0.005", m.name, f, me.rejected)
			case f > 1 && (me.goodput < 0.9 || me.p50 > 2 || me.p99 > 2.5):
				t.Errorf("%s %gx: goodput %.3f p50 %.2fx p99 %.2fx, want >= 0.9, <= 2x, <= 2.5x", m.name, f, me.goodput, me.p50, me.p99)
			}
		}
	}
}

// Target 6: the failure modes reported against other adaptive limiters,
// as regression tests.

// The no-load estimate does not drift up during a long overload: the
// backend is learned at half load for 20 s, then 5× its capacity arrives
// for 60 s (over a hundred windows), and the estimate stays within 10% of
// the service time throughout. (A baseline that averages recent latencies
// climbs toward the overloaded latency and stops shedding.)
func TestTarget6BaselineDoesNotDrift(t *testing.T) {
	m := model{name: "fifo/fixed", workers: 8, d: distFixed}
	const surge = int64(20 * time.Second)
	sc := &scenario{m: m, classes: []classLoad{{factor: 0.5}, {factor: 4.5, from: surge}}, duration: int64(80 * time.Second), deadline: simDeadline, seed: 1}
	s := runSim(sc)
	n, lo, hi := 0, math.Inf(1), 0.0
	for _, u := range s.updates {
		if u.t > surge {
			n++
			lo, hi = math.Min(lo, u.base), math.Max(hi, u.base)
		}
	}
	me := s.measure(surge+int64(5*time.Second), sc.duration, s.capacity(m.workers))
	t.Logf("%d windows of overload: no-load estimate in [%v, %v]; %v", n, time.Duration(lo), time.Duration(hi), me)
	if n < 30 {
		t.Fatalf("only %d windows of overload", n)
	}
	if lo < 0.9*float64(100*ms) || hi > 1.1*float64(100*ms) {
		t.Errorf("no-load estimate moved to [%v, %v] during the overload, want within 10%% of 100ms", time.Duration(lo), time.Duration(hi))
	}
}

// The limit does not rise forever under a modest overload: at 1.2× for
// five minutes it stays within twice the workers, and latency within
// target 2. (Gradient2's queue term raises it a little every window while
// the gradient sits near 1.)
func TestTarget6NoRiseUnderModestOverload(t *testing.T) {
	m := model{name: "fifo/fixed", workers: 8, d: distFixed}
	sc := &scenario{m: m, classes: []classLoad{{factor: 1.2}}, duration: int64(300 * time.Second), deadline: simDeadline, seed: 1}
	s := runSim(sc)
	top := 0
	for _, u := range s.updates {
		if u.t > int64(60*time.Second) {
			top = max(top, u.limit)
		}
	}
	me := s.measure(int64(60*time.Second), sc.duration, s.capacity(m.workers))
	t.Logf("%d windows; highest limit after the first minute %d; %v", len(s.updates), top, me)
	if top > 2*m.workers {
		t.Errorf("limit rose to %d, want <= %d", top, 2*m.workers)
	}
	if me.p50 > 2 || me.p99 > 2.5 || me.goodput < 0.9 {
		t.Errorf("p50 %.2fx p99 %.2fx goodput %.3f, want <= 2x, <= 2.5x, >= 0.9", me.p50, me.p99, me.goodput)
	}
}

// The default floor lets the limiter shed down to a backend that serves
// two calls at a time. (A floor of 20 cannot protect it: 18 calls would
// queue.) Such a backend completes 20 calls a second, so a window of 40
// outcomes would last two seconds, twenty round trips. A window also
// closes after 8 round trips' worth of outcomes (Little's law: as many per
// round trip as calls in flight), so that at a low rate the limit still
// moves about once a second: after the first 10 s the median window lasts
// at most 1.2 s (a probe's window still takes its full count), and from
// 20 s on the run is within targets 1 and 2.
func TestTarget6FloorReachesRealConcurrency(t *testing.T) {
	m := model{name: "fifo/fixed", workers: 2, d: distFixed}
	const dur, warm = int64(120 * time.Second), int64(20 * time.Second)
	for _, f := range []float64{2, 5} {
		sc := &scenario{m: m, classes: []classLoad{{factor: f}}, duration: dur, deadline: simDeadline, seed: 1}
		s := runSim(sc)
		me := s.measure(warm, dur, s.capacity(m.workers))
		top, n := 0, 0
		var lens []float64
		var prev int64
		for _, u := range s.updates {
			if prev >= int64(10*time.Second) {
				lens = append(lens, float64(u.t-prev))
			}
			prev = u.t
			if u.t > warm {
				top = max(top, u.limit)
			} else {
				n++
			}
		}
		median := time.Duration(pct(lens, 0.50))
		t.Logf("%gx: final limit %d, %d windows in the first %v, then the highest limit %d; median window after 10s %v; %v",
			f, s.l.Limit(), n, time.Duration(warm), top, median.Round(time.Millisecond), me)
		if top > 4 || me.goodput < 0.9 || me.p50 > 2 || me.p99 > 2.5 {
			t.Errorf("%gx: highest limit %d goodput %.3f p50 %.2fx p99 %.2fx; want <= 4, >= 0.9, <= 2x, <= 2.5x", f, top, me.goodput, me.p50, me.p99)
		}
		if median > 1200*time.Millisecond {
			t.Errorf("%gx: the median window lasted %v, want <= 1.2s", f, median)
		}
	}
}

// Drops lower the limit: a backend that refuses work at once (a fast 503)
// when two calls wait looks faster, not slower, when overloaded. Every
// algorithm must bring the limit down to about what it holds (8 workers +
// 2 queued) instead of climbing on the fast refusals. (Vegas and AIMD
// find the limit by touching it: a refusal takes 1 ms, so the few windows
// above it produce many refusals, logged, at no cost to the goodput.)
func TestTarget6DropsLowerTheLimit(t *testing.T) {
	m := model{name: "fifo/fixed/refusing", workers: 8, d: distFixed, maxQueue: 2}
	for _, alg := range []Algorithm{Gradient(), Vegas(), AIMD()} {
		s, me := load(m, 3, 1, WithAlgorithm(alg))
		top := 0
		for _, u := range s.updates {
			if u.t > simWarmup {
				top = max(top, u.limit)
			}
		}
		t.Logf("%v: highest limit after warm-up %d, %d refusals; %v", alg, top, me.refused, me)
		if top > 16 || me.goodput < 0.9 {
			t.Errorf("%v: limit up to %d, goodput %.3f; want <= 16 and >= 0.9", alg, top, me.goodput)
		}
	}
}

// A limit far too high to start with (500, against 8 workers at 3×)
// overloads the backend until callers time out, and the backend goes on
// working for callers that left. The drops bring the limit down, the
// backend works off what the callers left behind, and from 20 s on the run
// is within targets 1 and 2.
func TestTarget6RecoversFromTimeouts(t *testing.T) {
	m := model{name: "fifo/fixed", workers: 8, d: distFixed}
	sc := &scenario{m: m, classes: []classLoad{{factor: 3}}, duration: simDuration, deadline: simDeadline, seed: 1, opts: []Option{WithInitialLimit(500)}}
	s := runSim(sc)
	for t0 := int64(0); t0 < int64(20*time.Second); t0 += int64(5 * time.Second) {
		t.Logf("%v-%v: %v", time.Duration(t0), time.Duration(t0+int64(5*time.Second)), s.measure(t0, t0+int64(5*time.Second), s.capacity(m.workers)))
	}
	me := s.measure(int64(20*time.Second), simDuration, s.capacity(m.workers))
	t.Logf("final limit %d; from 20s on %v", s.l.Limit(), me)
	if me.goodput < 0.9 || me.p50 > 2 || me.p99 > 2.5 {
		t.Errorf("goodput %.3f p50 %.2fx p99 %.2fx from 20s on; want >= 0.9, <= 2x, <= 2.5x", me.goodput, me.p50, me.p99)
	}
}

// The start-up probe is the only probe while the backend stays as it is:
// its own windows, which read below the estimate they re-measure by
// design, are not doubt. (They were: two of the three windows after the
// probe "read below 0.9 of the estimate", and a second probe followed at
// once in 44 of this test's 54 runs, each a window at half the limit,
// below the knee.) Every model, at 2×, 3× and 5×, three seeds, 20 s: fewer than
// 200 windows, so no periodic probe is due.
func TestStartupProbeOnce(t *testing.T) {
	models := append([]model{{name: "fifo/fixed 40ms", workers: 8, d: fixedDist{40 * ms}}}, simModels...)
	for _, m := range models {
		for _, f := range []float64{2, 3, 5} {
			for _, seed := range simSeeds {
				sc := &scenario{m: m, classes: []classLoad{{factor: f}}, duration: int64(20 * time.Second), deadline: simDeadline, seed: seed}
				s := runSim(sc)
				if len(s.updates) >= probeEvery {
					t.Fatalf("%s %gx seed %d: %d windows, a periodic probe may be due", m.name, f, seed, len(s.updates))
				}
				if s.l.probes != 1 {
					t.Errorf("%s %gx seed %d: %d probes in 20 s of a steady backend, want the start-up probe alone", m.name, f, seed, s.l.probes)
				}
			}
		}
	}
}

// The start-up probe follows the first window at once when the limit
// bound in it. That window ramped up from nothing at the initial limit of
// 20, and its latency is no reference; a window later, as before, the
// gradient had read it as its own reference and raised the limit a
// quarter first: on the wall-clock comparison's backend (8 workers ×
// 40 ms) at 2×-5×, 40 more calls behind a queue of up to 12, and in the
// simulator the p99 of a 10 s run went from 2.6-3.0× the service time to
// 2.1-2.6× (1.5-1.9× from 2 s on, where neither reaches). A first window
// in which the limit did not bind (half load) keeps its limit.
func TestStartupProbeAfterFirstWindow(t *testing.T) {
	models := append([]model{{name: "fifo/fixed 40ms", workers: 8, d: fixedDist{40 * ms}}}, simModels...)
	for _, m := range models {
		for _, f := range []float64{0.5, 2, 3, 5} {
			for _, seed := range simSeeds {
				sc := &scenario{m: m, classes: []classLoad{{factor: f}}, duration: int64(3 * time.Second), deadline: simDeadline, seed: seed}
				s := runSim(sc)
				if len(s.updates) == 0 {
					t.Fatalf("%s %gx seed %d: no window closed in 3 s", m.name, f, seed)
				}
				want := DefaultInitialLimit / 2 // the probe's first step
				if f < 1 {
					want = DefaultInitialLimit
				}
				if got := s.updates[0].limit; got != want {
					t.Errorf("%s %gx seed %d: limit %d after the first window, want %d", m.name, f, seed, got, want)
				}
			}
		}
	}
}

// A probe's window below the knee idles some of the backend's workers, so
// it should last no longer than its reading needs. When every latency of
// the window lies within probeSpan+1 histogram buckets (a spread of at
// most about a sixth: a steady service time, and no queue), the mean of
// 2·limit of them is as good as that of minSamples, and the window closes
// there; a window of wider spread (a lognormal service time) still takes
// its full count. On the wall-clock comparison's backend (8 workers ×
// 40 ms), the start-up probe's window at a limit of 5 took 40 calls, 0.32 s
// at 5/8 of the capacity: at 2× the first 2 s completed 0.92 of it.
func TestProbeWindowSteadyBackend(t *testing.T) {
	const minSamples = 40 // the default
	for _, m := range []model{
		{name: "fifo/fixed 40ms", workers: 8, d: fixedDist{40 * ms}},
		{name: "fifo/lognormal", workers: 8, d: distLognormal},
	} {
		steady := m.d == fixedDist{40 * ms}
		for _, f := range []float64{2, 5} {
			for _, seed := range simSeeds {
				sc := &scenario{m: m, classes: []classLoad{{factor: f}}, duration: int64(4 * time.Second), deadline: simDeadline, seed: seed}
				s := runSim(sc)
				// The windows run below the workers: the start-up
				// probe's (the only probe in 4 s).
				var below []int
				for i := 1; i < len(s.updates); i++ {
					if s.updates[i-1].limit < m.workers {
						below = append(below, s.updates[i].n)
					}
				}
				me := s.measure(0, int64(2*time.Second), s.capacity(m.workers))
				name := fmt.Sprintf("%s %gx seed %d", m.name, f, seed)
				t.Logf("%s: windows below the workers closed with %v successes; first 2 s %v", name, below, me)
				if len(below) == 0 {
					t.Fatalf("%s: no window below the workers: the start-up probe did not run", name)
				}
				for _, n := range below {
					if steady && n >= minSamples || !steady && n < minSamples {
						t.Errorf("%s: a window below the workers closed with %d successes; want %s %d", name, n, map[bool]string{true: "fewer than", false: "at least"}[steady], minSamples)
					}
				}
				if steady && me.goodput < 0.95 {
					t.Errorf("%s: goodput %.3f in the first 2 s, want >= 0.95", name, me.goodput)
				}
			}
		}
	}
}

// TestTimeoutsOnlyOverload: a backend that answers nothing past two queued
// calls (a full accept queue: the call hangs until the caller's 1 s
// deadline) while every call it takes finishes in 100 ms, so the overload
// shows only as timeouts, a deadline after the admission: the case AIMD's
// doc names. Two rules answer it. Drops of permits taken before a raise
// count (only a cut answers a drop): without it AIMD, which raises every
// saturated window, never saw them, and 26–27% of the calls it admitted
// timed out at every load. And after a lossy window no raise comes before
// its drops' age has passed again, when the limit it set can first show
// drops of its own: without it AIMD let 9–10% time out, Gradient 9–19% at
// 2× (its raises of up to a quarter a window outran the late drops). Now
// AIMD 5–6%, Gradient 0–4.8%, Vegas 7–8%.
func TestTimeoutsOnlyOverload(t *testing.T) {
	m := model{name: "fifo/fixed/hanging", workers: 8, d: distFixed, maxQueue: 2, refuseAfter: int64(10 * time.Second)}
	for _, alg := range []Algorithm{AIMD(), Gradient(), Vegas()} {
		for _, f := range []float64{2, 3, 5} {
			for _, seed := range simSeeds {
				sc := &scenario{m: m, classes: []classLoad{{factor: f}}, duration: int64(80 * time.Second), deadline: simDeadline, seed: seed, opts: []Option{WithAlgorithm(alg)}}
				s := runSim(sc)
				me := s.measure(int64(20*time.Second), sc.duration, s.capacity(m.workers))
				frac := float64(me.abandoned) / float64(me.good+me.abandoned)
				t.Logf("%v %gx seed %d: %.1f%% of the admitted calls timed out; %v", alg, f, seed, 100*frac, me)
				if bound := map[Algorithm]float64{AIMD(): 0.08, Gradient(): 0.06, Vegas(): 0.10}[alg]; frac > bound {
					t.Errorf("%v %gx seed %d: %.1f%% of the admitted calls timed out from 20 s on", alg, f, seed, 100*frac)
				}
			}
		}
	}
}

// TestSmallMinSamplesLearns: with WithMinSamples below 5 and a limit of 2,
// windows closed with max(n, 2·limit) outcomes, fewer than the 5 successes
// a window's latency needs to count, so Gradient and Vegas never learned
// the no-load latency and held the limit at 2 whatever the load (goodput
// 0.24 at 3×). A window now gathers at least 5.
func TestSmallMinSamplesLearns(t *testing.T) {
	m := model{name: "fifo/fixed", workers: 8, d: distFixed}
	for _, alg := range []Algorithm{Gradient(), Vegas()} {
		for _, n := range []int{1, 4} {
			sc := &scenario{m: m, classes: []classLoad{{factor: 3}}, duration: int64(60 * time.Second), deadline: simDeadline, seed: 1,
				opts: []Option{WithAlgorithm(alg), WithInitialLimit(2), WithMinSamples(n)}}
			s := runSim(sc)
			me := s.measure(int64(20*time.Second), sc.duration, s.capacity(m.workers))
			t.Logf("%v WithMinSamples(%d) from a limit of 2 at 3x: final limit %d; %v", alg, n, s.l.Limit(), me)
			if me.goodput < 0.9 {
				t.Errorf("%v WithMinSamples(%d) from a limit of 2 at 3x: goodput %.3f (limit %d), want >= 0.9", alg, n, me.goodput, s.l.Limit())
			}
		}
	}
}

// A backlog whose maxWait is at least the callers' deadline (1 s here;
// WithBacklog(n, 2*time.Second) in front of 1 s client timeouts is a
// natural setting). Served oldest first, every waiter got its permit after
// waiting nearly its whole deadline, its call was abandoned in the backend,
// the drops cut the limit, which lengthened the wait: at 3× the limit fell
// to 1 and the goodput to 0 for good, with every algorithm. Once a window's
// loss comes mostly from permits handed out of the backlog, it serves the
// newest waiters first until it empties. A backlog must not make the
// limiter worse than none (goodput >= 0.9 at 3× without one).
func TestBacklogWaitPastDeadline(t *testing.T) {
	m := model{name: "fifo/fixed", workers: 8, d: distFixed}
	for _, alg := range []Algorithm{Gradient(), Vegas(), AIMD()} {
		for _, b := range []struct {
			n    int
			wait time.Duration
		}{{64, time.Second}, {1000, 2 * time.Second}, {MaxLimitBound, time.Hour}} {
			s, me := load(m, 3, 1, WithAlgorithm(alg), WithBacklog(b.n, b.wait))
			name := fmt.Sprintf("%v, WithBacklog(%d, %v) at 3x", alg, b.n, b.wait)
			t.Logf("%s: final limit %d; %v", name, s.l.Limit(), me)
			if me.goodput < 0.9 {
				t.Errorf("%s: goodput %.3f (limit %d), want >= 0.9", name, me.goodput, s.l.Limit())
			}
		}
	}
}

// A backend of two kinds of call (cache hits of 1 ms, misses of 200 ms)
// at half load, 16 workers. The mean of a window's fastest 80% then
// straddles the two modes, and how many misses a window draws (70/30:
// 12 ± 2.9 of 40) swings it from about 1 to 45 ms with no queue at all:
// Gradient cut on that, and rarely found a window low enough to raise, so
// the limit ratcheted down and 17-45% of the calls were shed at 70% hits
// (13.8% at 80%, seed 1). It now cuts only when the window's fastest half
// shows a queue too. Target 3's 0.5% holds at 90% and 80% hits; at 70% a
// burst that fills every worker with misses is a real queue for the hits,
// and the cut it brings is not undone at half load, where windows are
// seldom saturated: 0.26-1.08% shed (docs/adaptive.md).
func TestBimodalLightLoad(t *testing.T) {
	for _, c := range []struct {
		hit, most float64
	}{{0.9, 0.005}, {0.8, 0.005}, {0.7, 0.015}} {
		m := model{name: fmt.Sprintf("fifo/bimodal %.0f%% 1ms, else 200ms", 100*c.hit), workers: 16, d: mixDist{[]int64{ms, 200 * ms}, []float64{c.hit, 1 - c.hit}}}
		for _, seed := range simSeeds {
			s, me := load(m, 0.5, seed)
			t.Logf("%s 0.5x seed %d: final limit %d, estimate %v; %v", m.name, seed, s.l.Limit(), time.Duration(s.l.base).Round(time.Microsecond), me)
			if me.rejected > c.most {
				t.Errorf("%s 0.5x seed %d: rejected %.4f, want <= %.3f", m.name, seed, me.rejected, c.most)
			}
		}
	}
}
