package shardedbucket

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// TestModel and FuzzModel drive takeAt, reserve and the undos directly, on
// a FakeClock and from random start shards, so that every interleaving of
// takes (at the current reading or a stale one), gathers, reservations,
// cancellations (the newest and older ones), small steps and refill past
// the cap is one goroutine's sequence. The bucket collapses into its central
// word and spreads again along the way (central.go), and concurrent callers
// are staged inside each half-done step: after each shard is frozen, after
// c is spread and after each shard is dealt its share, a caller may move
// the clock on and take, at that later reading or at a stale one, so that
// steps meet takes at every point. Concurrent callers are staged inside
// gathers too, so that they lose races and put back, inside reserve as well.
// Concurrent callers from other homes are staged just before central
// admissions, so that those lose the central word and stand their homes
// aside (central.go). Each admission is recorded at its reading, a
// reservation at its wake, and the model checks the window bound on every
// window, that a stand aside ends before the bucket could fill up from the
// central word it was decided on, that no TryAcquire or
// immediate reservation succeeds while an uncancelled reservation is still
// waiting, and that the bucket is full again after idling (no debt leaks).
// It catches a reservation undo that ignores the tail rule at once, a
// collapse that sums the shards at a reading older than a take it froze,
// and a stand begun, or a turn given, with a token left (TestAsideSpan
// checks the span New gives: the model draws its own).
// A deadlock, such as a put-back waiting for the resvMu its own goroutine
// holds, fails the seed with every goroutine's stack instead of hanging.
func TestModel(t *testing.T) {
	var total modelStats
	for seed := range uint64(2000) {
		total.add(checkModel(t, seed))
	}
	// The seeds must reach what they are meant to test.
	t.Logf("%+v", total)
	if total.collapses < 2000 || total.spreads < 1000 || total.stepTakes < 1000 || total.staleTakes < 1000 || total.lostGathers < 500 ||
		total.lostCentral < 500 || total.asides < 500 || total.turns < 50 {
		t.Errorf("the seeds no longer reach every transition: %+v", total)
	}
}

func FuzzModel(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { checkModel(t, seed) })
}

// modelStats counts what a seed reached.
type modelStats struct {
	collapses, spreads int64 // steps between the representations
	stepTakes          int64 // admissions by callers staged inside a step
	staleTakes         int64 // admissions at a stale reading
	lostGathers        int64 // gathers that lost a staged race
	lostCentral        int64 // central admissions that lost a staged race
	asides             int64 // homes that stood aside (central.go)
	turns              int64 // of them, stands after a run of admissions (a turn given)
}

func (m *modelStats) add(o modelStats) {
	m.collapses += o.collapses
	m.spreads += o.spreads
	m.stepTakes += o.stepTakes
	m.staleTakes += o.staleTakes
	m.lostGathers += o.lostGathers
	m.lostCentral += o.lostCentral
	m.asides += o.asides
	m.turns += o.turns
}

func checkModel(t *testing.T, seed uint64) modelStats {
	var err error
	var st modelStats
	buckettest.Watchdog(t, buckettest.HangAfter, fmt.Sprintf("model seed %d", seed), func() { st, err = modelSeed(seed) })
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	return st
}

// modelRates include blocks smaller than a token (1e9/s: one unit a token)
// and fractional rates.
var modelRates = []float64{1, 0.5, 3, 1.0 / 3, 1000, 1e9, 7.3, 1e8, 2.5e8}

func modelSeed(seed uint64) (modelStats, error) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	capacity := int64(r.IntN(40) + 1)
	if r.IntN(4) == 0 {
		capacity = int64(r.IntN(4) + 1)
	}
	rate := modelRates[r.IntN(len(modelRates))]
	shards := 1 << r.IntN(5)
	for int64(shards) > capacity {
		shards >>= 1
	}
	st, err := runModel(r, capacity, rate, shards)
	if err != nil {
		return st, fmt.Errorf("capacity %d, rate %v, %d shards: %w", capacity, rate, shards, err)
	}
	return st, nil
}

// pend is a reservation the model holds: its wake, size and undo.
type pend struct {
	wake int64
	n    int64
	undo func() bool
	done bool
}

func runModel(r *rand.Rand, capacity int64, rate float64, shards int) (modelStats, error) {
	var st modelStats
	clk := buckettest.NewFakeClock(0)
	b, err := New(capacity, rate, admit.WithClock(clk), WithShards(shards))
	if err != nil {
		return st, err
	}
	// Stands of any length the proof allows (up to the capacity less a
	// token; New's is at most a microsecond of refill, which at the slow
	// rates here is nothing), under admit_purego too, and turns after a
	// few admissions, so that the seeds reach them.
	b.asideUnits, b.asideRun = r.Int64N(b.p.Cap-b.p.Units(1)+1), 1+r.Int64N(3)
	period := int64(float64(time.Second) / rate)
	var adm []buckettest.Admission
	var ps []*pend
	var log []string
	made := 0
	// fail keeps the first error found inside a hook, where the model
	// cannot return; every step checks it.
	var fail error
	// admitted records n tokens admitted at the reading at, and checks that
	// no uncancelled waiter due after at was overtaken.
	admitted := func(at, n int64, what string) {
		adm = append(adm, buckettest.Admission{At: at, N: n})
		for _, p := range ps {
			if !p.done && p.wake > at && fail == nil {
				fail = fmt.Errorf("%s: %d tokens at %d overtook a waiter due at %d", what, n, at, p.wake)
			}
		}
	}
	// A concurrent caller, staged in gathers: now and then it takes a
	// whole token, first, from the shard the gather planned to take the
	// most from (a TryAcquire that won the race), so that gathers lose
	// races and put back, from TryAcquireN and from inside reserve alike.
	// Not inside a step: it holds resvMu, which the put-back would wait
	// for, as a real put-back waits until the step is done.
	inStep := false
	// curAt is the reading of the model's take or reserve under way. A
	// caller staged in its gather or its central admission takes at the
	// same stream value, so it is recorded at curAt: by the time it runs, a
	// step may have moved the clock on, and an admission at a stale stream
	// value must count where its reading falls.
	var curAt int64
	testHookGather = func(b *Bucket, v int64, start uint, take []int64) {
		if inStep || r.IntN(3) != 0 || !stealOne(b, v, start, take) {
			return
		}
		log = append(log, fmt.Sprintf("t=%d stole(1) at %d in a gather of %v", clk.Now(), curAt, take))
		admitted(curAt, 1, "a take that won a gather's race")
		st.lostGathers++
	}
	// Concurrent callers, staged inside a step between the
	// representations (central.go): now and then the clock moves on, a
	// little or past the cap, and a caller takes at that later reading, or
	// at a stale one.
	// Not inside reserve: the model records what reserve admits at once,
	// and the wake it returns, from the reading it took, which is then the
	// op's own; a take's reading is fixed before the call.
	inReserve := false
	testHookStep = func(b *Bucket, i int) {
		if i == -1 {
			st.spreads++
		}
		if inStep || r.IntN(2) != 0 {
			return
		}
		inStep = true
		defer func() { inStep = false }()
		switch {
		case inReserve:
		case r.IntN(4) == 0: // much later: the refill passes the cap inside the step
			clk.Advance(time.Duration(period * (1 + r.Int64N(capacity+1))))
		case r.IntN(2) == 0:
			clk.Advance(time.Duration(r.Int64N(period + 2)))
		}
		at := clk.Now()
		if r.IntN(3) == 0 {
			at = max(0, at-r.Int64N(2*period+2))
		}
		n := int64(1)
		if r.IntN(2) == 0 {
			n = 1 + r.Int64N(capacity)
		}
		ok := b.takeAt(b.p.Units(n), b.p.V(at), uint(r.IntN(64)))
		log = append(log, fmt.Sprintf("t=%d in a step (shard %d, c=%d): take(%d) at %d = %v", clk.Now(), i, b.c.Load(), n, at, ok))
		if ok {
			admitted(at, n, "a take inside a step")
			st.stepTakes++
		}
	}
	// A concurrent caller on another core, staged just before a central
	// admission's CompareAndSwap: now and then it takes a token from
	// another home at the same reading, so that the call loses the central
	// word and, left with less than a token, stands its home aside. The
	// call then decides on c as the other caller left it, which the
	// model's exactness check (dryDecision, made before the call) does not
	// know: raced tells take to skip that check for this call.
	raced := false
	testHookCentral = func(b *Bucket, v int64, start uint) {
		if inStep || r.IntN(3) != 0 || len(b.shards) < 2 {
			return
		}
		hook := testHookCentral
		testHookCentral = nil
		defer func() { testHookCentral = hook }()
		other := start + 1 + uint(r.IntN(len(b.shards)-1)) // another home
		if b.takeAt(b.p.Units(1), v, other) {
			log = append(log, fmt.Sprintf("t=%d a take from shard %d won a central race at %d", clk.Now(), other&b.mask, curAt))
			admitted(curAt, 1, "a take that won a central race")
			raced = true
			st.lostCentral++
		}
	}
	defer func() { testHookGather, testHookStep, testHookCentral = nil, nil, nil }()
	// take is a TryAcquireN of n tokens at the reading at, from a random
	// start shard, between steps: a take from a frozen shard must decide
	// exactly as the central word does (dryDecision).
	take := func(n, at int64) (bool, error) {
		start := uint(r.IntN(64))
		need, v := b.p.Units(n), b.p.V(at)
		want, dry := dryDecision(b, need, v, start)
		raced, curAt = false, at
		h := &b.shards[start&b.mask]
		before := h.aside.Load()
		ok := b.takeAt(need, v, start)
		if ok && h.aside.Load() != before {
			st.turns++
		}
		if dry && !raced && ok != want {
			return ok, fmt.Errorf("t=%d take(%d) at %d from a frozen shard = %v, the central word says %v", clk.Now(), n, at, ok, want)
		}
		return ok, nil
	}
	asides := make([]int64, len(b.shards))
	for range 60 + r.IntN(200) {
		if fail != nil {
			return st, fmt.Errorf("%w\n%v", fail, log)
		}
		now := clk.Now()
		switch op := r.IntN(11); op {
		case 0, 1: // TryAcquireN at a random start shard
			n := int64(r.IntN(int(capacity)+1)) + 1
			if n > capacity {
				n = 1
			}
			ok, err := take(n, now)
			if err != nil {
				return st, fmt.Errorf("%w\n%v", err, log)
			}
			log = append(log, fmt.Sprintf("t=%d try(%d)=%v", now, n, ok))
			if ok {
				admitted(now, n, "TryAcquireN")
			}
		case 2: // drain with TryAcquire
			k := int64(0)
			for {
				ok, err := take(1, now)
				if err != nil {
					return st, fmt.Errorf("a drain, after %d: %w\n%v", k, err, log)
				}
				if !ok {
					break
				}
				k++
			}
			if k > 0 {
				admitted(now, k, "a drain")
			}
			log = append(log, fmt.Sprintf("t=%d drain=%d", now, k))
		case 3, 4: // reserve
			n := int64(r.IntN(int(capacity))) + 1
			inReserve, curAt = true, now
			wait, _, undo := b.reserve(b.p.Units(n), math.MaxInt64)
			inReserve = false
			log = append(log, fmt.Sprintf("t=%d reserve(%d) wait=%d", now, n, wait))
			switch {
			case wait == 0:
				admitted(now, n, "a reservation taken at once")
			case wait < 0:
				return st, fmt.Errorf("reserve(%d) = Never\n%v", n, log)
			default:
				ps = append(ps, &pend{wake: now + wait, n: n, undo: undo})
				made++
			}
		case 5, 6: // cancel a random pending waiter
			var live []*pend
			for _, p := range ps {
				if !p.done {
					live = append(live, p)
				}
			}
			if len(live) == 0 {
				continue
			}
			p := live[r.IntN(len(live))]
			if r.IntN(3) == 0 {
				p = live[len(live)-1] // newest: exercise give-backs
			}
			p.done = true
			if p.wake <= now {
				adm = append(adm, buckettest.Admission{At: p.wake, N: p.n})
				continue
			}
			cancelled := p.undo()
			log = append(log, fmt.Sprintf("t=%d undo(wake %d)=%v", now, p.wake, cancelled))
			if !cancelled {
				return st, fmt.Errorf("undo before the wake reported due\n%v", log)
			}
		case 7: // small step
			clk.Advance(time.Duration(r.Int64N(period/4 + 2)))
		case 8: // a few ns
			clk.Advance(time.Duration(r.IntN(5)))
		case 9: // big step: refill past the cap
			clk.Advance(time.Duration(period * int64(r.IntN(int(capacity)+2))))
		case 10: // TryAcquireN at a stale reading: it sees its own moment's balance
			at := max(0, now-r.Int64N(3*period+2))
			n := 1 + r.Int64N(capacity)
			ok, err := take(n, at)
			if err != nil {
				return st, fmt.Errorf("%w\n%v", err, log)
			}
			log = append(log, fmt.Sprintf("t=%d try(%d) at %d=%v", now, n, at, ok))
			if ok {
				admitted(at, n, "a take at a stale reading")
				st.staleTakes++
			}
		}
		log = log[max(0, len(log)-modelLogLines):] // the recent steps, for the failure message
		// A stand aside must end before the bucket could fill up from
		// the c it was decided on (seen, as the stand left it; a later
		// undo of the home's own reservation may lower seen, and gives
		// tokens back, which the rule excepts): it never makes the bucket
		// discard refill (central.go).
		for i := range b.shards {
			h := &b.shards[i]
			a, seen := h.aside.Load(), h.seen.Load()
			if a == asides[i] || a == 0 {
				asides[i] = a
				continue
			}
			asides[i] = a
			st.asides++
			if a-seen > b.p.Cap {
				return st, fmt.Errorf("shard %d stands aside until %d, from c=%d: past the capacity %d\n%v", i, a, seen, b.p.Cap, log)
			}
		}
		// waiters whose wake passed are admitted
		now = clk.Now()
		for _, p := range ps {
			if !p.done && p.wake <= now {
				p.done = true
				adm = append(adm, buckettest.Admission{At: p.wake, N: p.n})
			}
		}
	}
	if fail != nil {
		return st, fmt.Errorf("%w\n%v", fail, log)
	}
	for _, p := range ps {
		if !p.done {
			p.done = true
			adm = append(adm, buckettest.Admission{At: p.wake, N: p.n})
		}
	}
	st.collapses = b.epoch.Load() - st.spreads
	if err := buckettest.CheckAdmissions(capacity, rate, adm); err != nil {
		return st, fmt.Errorf("%v\n%v", err, log)
	}
	clk.Advance(time.Duration(period * int64(made+2) * (capacity + int64(shards) + 2)))
	if got := b.Tokens(); got != float64(capacity) {
		return st, fmt.Errorf("not full after idling: %v\n%v", got, log)
	}
	return st, nil
}

// dryDecision returns, for a take of need units at stream value v from
// start between the model's steps (no step under way), whether the central
// word admits it, and whether the take decides on the central word at all
// (the bucket central, the start shard frozen). A dry take must decide
// exactly so, whatever undos, spreads and collapses came before: a dry
// path that refused from anything but c (a cached copy of it, say) must
// still refuse only what c refuses.
func dryDecision(b *Bucket, need, v int64, start uint) (want, dry bool) {
	c, h := b.c.Load(), &b.shards[start&b.mask]
	if c == spread || h.z.Load() != frozen {
		return false, false
	}
	if v < h.aside.Load() {
		return false, true // standing aside (central.go)
	}
	return v-max(c, v-b.p.Cap) >= need, true
}

// modelLogLines is how many recent steps a failure message shows.
var modelLogLines = 60
