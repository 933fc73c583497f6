package rate

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	xrate "golang.org/x/time/rate"
)

// The differential test runs one sequence of explicit-time calls against
// this package, against golang.org/x/time/rate, and against two exact
// big.Rat models of x/time/rate's algorithm (the real-number arithmetic it
// approximates in float64, with the rate read as this package reads it):
//
//   - exactSound makes this package's documented sound choices (CancelAt
//     restores at most the reservation's tokens; a reservation made at Inf
//     restores nothing);
//   - exactX does exactly what x/time/rate's code does.
//
// This package must equal exactSound at every step, in every output and in
// its whole state (balance, last update, last event) — no tolerance. Where
// its output differs from x/time/rate's, the test establishes the cause:
//   - exactX agrees with x/time/rate: the difference is a sound choice, and
//     the test requires that exactSound and exactX have diverged;
//   - exactX disagrees with x/time/rate: x/time/rate's float arithmetic is
//     the only thing that differs between the two, so it is the cause.
// Anything else fails. After the first difference the states no longer
// correspond, so the rest of the sequence is checked against exactSound
// only.

// exactModel is x/time/rate's Limiter in exact arithmetic. Its times are
// time.Time, as x/time/rate's are: elapsed times saturate where
// time.Time.Sub does, and times to act are exact however far.
type exactModel struct {
	sound     bool
	inf       bool     // limit == Inf
	fill      bool     // refills fully in any positive time
	rate      *big.Rat // tokens per nanosecond
	burst     int
	tokens    *big.Rat
	fresh     bool // no update yet: last is before every time
	last      time.Time
	lastEvent time.Time
	evented   bool // lastEvent has been set (before, it is unobservable)
	// The sound model's bookkeeping for a cancel across changes of the
	// limit or burst, as the Limiter keeps it: tokens reserved plus one
	// per change, the changes, and the latest four's start and peak.
	seq, changes uint64
	gens         [genRing]exactGen
}

type exactGen struct {
	start uint64
	peak  *big.Rat
}

type exactReservation struct {
	ok        bool
	cancelled bool // cancelled once: the sound model gives back nothing more
	tokens    int
	act       time.Time
	rate      *big.Rat
	inf       bool
	seq       uint64 // the model's seq after it
}

func newExact(l Limit, b int, sound bool) *exactModel {
	m := &exactModel{sound: sound, burst: b, tokens: new(big.Rat).SetInt64(burstCap(b)), fresh: true}
	m.setRate(l)
	return m
}

func (m *exactModel) setRate(l Limit) {
	num, den, fill := ratio(l, 1)
	m.inf, m.fill = l == Inf, fill
	m.rate = new(big.Rat).SetFrac(new(big.Int).SetUint64(num), new(big.Int).SetUint64(den))
}

// advance is balance for a call that updates the model to t: it raises the
// latest change's peak to the balance, as Limiter.advance does.
func (m *exactModel) advance(t time.Time) *big.Rat {
	tok := m.balance(t)
	m.peak(tok)
	return tok
}

// peak raises the latest change's peak to tok, in the sound model once a
// change was made.
func (m *exactModel) peak(tok *big.Rat) {
	if m.sound && m.changes != 0 {
		if g := &m.gens[(m.changes-1)%genRing]; tok.Cmp(g.peak) > 0 {
			g.peak = new(big.Rat).Set(tok)
		}
	}
}

// balance is the balance at t, changing nothing.
func (m *exactModel) balance(t time.Time) *big.Rat {
	tok := new(big.Rat).Set(m.tokens)
	burst := new(big.Rat).SetInt64(burstCap(m.burst))
	if m.fresh || t.After(m.last) {
		if m.fresh || m.fill {
			tok.Set(burst)
		} else {
			tok.Add(tok, new(big.Rat).Mul(m.rate, new(big.Rat).SetInt64(int64(t.Sub(m.last)))))
		}
	}
	if tok.Cmp(burst) > 0 {
		tok.Set(burst)
	}
	return tok
}

// change records a change of the limit or burst, as Limiter.change does.
func (m *exactModel) change() {
	if !m.sound {
		return
	}
	m.seq++
	m.gens[m.changes%genRing] = exactGen{start: m.seq, peak: new(big.Rat).Set(m.tokens)}
	m.changes++
}

// floorInt returns ⌊x⌋, capped at math.MaxInt64.
func floorInt(x *big.Rat) int64 {
	q := new(big.Int).Div(x.Num(), x.Denom()) // Euclidean: floor for positive denominators
	if !q.IsInt64() {
		if q.Sign() > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return q.Int64()
}

func (m *exactModel) update(t time.Time) { m.last, m.fresh = t, false }

func (m *exactModel) reserve(t time.Time, n int, maxWait time.Duration) exactReservation {
	if m.inf {
		return exactReservation{ok: true, tokens: n, act: t, inf: true}
	}
	tok := m.balance(t) // a refused reservation changes nothing
	before := new(big.Rat).Set(tok)
	tok.Sub(tok, new(big.Rat).SetInt64(int64(n)))
	var wait int64
	if tok.Sign() < 0 && !m.fill {
		if m.rate.Sign() == 0 {
			wait = int64(InfDuration)
		} else {
			wait = floorInt(new(big.Rat).Quo(new(big.Rat).Neg(tok), m.rate))
		}
	}
	if n > m.burst || wait > int64(maxWait) {
		return exactReservation{}
	}
	m.peak(before)
	m.tokens, m.lastEvent, m.evented = tok, t.Add(time.Duration(wait)), true
	m.seq += uint64(n)
	m.update(t)
	return exactReservation{ok: true, tokens: n, act: m.lastEvent, rate: new(big.Rat).Set(m.rate), seq: m.seq}
}

// cancel is CancelAt. It reports whether the sound rules changed the
// outcome, computed by also running x/time/rate's rule.
func (m *exactModel) cancel(r *exactReservation, t time.Time) (divergent bool) {
	if !r.ok {
		return false
	}
	if r.cancelled && m.sound {
		// x/time/rate gives the tokens back again: divergent if that
		// changes its state.
		x := *m
		x.sound = false
		x.cancel(r, t)
		return x.tokens.Cmp(m.tokens) != 0 || !x.last.Equal(m.last) || !x.lastEvent.Equal(m.lastEvent)
	}
	r.cancelled = true
	if m.inf || r.tokens == 0 || r.act.Before(t) {
		return false
	}
	rate := r.rate
	if r.inf {
		if m.sound {
			return true // x/time restores all, at its zero limit field
		}
		rate = new(big.Rat)
	}
	if m.sound && m.changes != 0 && m.gens[(m.changes-1)%genRing].start > r.seq {
		// Made before a change: x/time's rule would give what it gives;
		// the sound one is cancelChanged's.
		x, xr := *m, *r
		x.sound = false
		x.cancel(&xr, t)
		if t.Before(r.act) {
			m.cancelChanged(r, t)
		}
		return x.tokens.Cmp(m.tokens) != 0 || !x.last.Equal(m.last) || !x.lastEvent.Equal(m.lastEvent)
	}
	gap := new(big.Rat).SetInt64(int64(m.lastEvent.Sub(r.act)))
	restore := new(big.Rat).Sub(new(big.Rat).SetInt64(int64(r.tokens)), new(big.Rat).Mul(rate, gap))
	if m.sound && gap.Sign() < 0 {
		divergent = rate.Sign() != 0 // x/time would restore more than r.tokens
		restore.SetInt64(int64(r.tokens))
	}
	if restore.Sign() <= 0 {
		return divergent
	}
	tok := m.advance(t)
	tok.Add(tok, restore)
	if burst := new(big.Rat).SetInt64(burstCap(m.burst)); tok.Cmp(burst) > 0 {
		tok.Set(burst)
	}
	m.tokens = tok
	m.update(t)
	if r.act.Equal(m.lastEvent) {
		prev, ok := r.act.Add(InfDuration), true
		if rate.Sign() != 0 {
			d := floorInt(new(big.Rat).Quo(new(big.Rat).SetInt64(int64(r.tokens)), rate))
			prev, ok = r.act.Add(-time.Duration(d)), d < math.MaxInt64
		}
		if ok && !prev.Before(t) {
			m.lastEvent = prev
		}
	}
	return divergent
}

// cancelChanged is Limiter.cancelChanged in exact arithmetic.
func (m *exactModel) cancelChanged(r *exactReservation, t time.Time) {
	tok := m.balance(t) // the peak is raised only if something comes back
	peak, k := new(big.Rat), uint64(0)
	if tok.Cmp(peak) > 0 {
		peak = tok
	}
	for i := uint64(0); i < min(m.changes, genRing); i++ {
		g := m.gens[(m.changes-1-i)%genRing]
		if g.start <= r.seq {
			break
		}
		if g.peak.Cmp(peak) > 0 {
			peak = g.peak
		}
		k++
	}
	if k == genRing && m.changes > genRing {
		return
	}
	after := new(big.Rat).SetInt64(int64(min(m.seq-r.seq-k, uint64(r.tokens))))
	burst := new(big.Rat).SetInt64(burstCap(m.burst))
	restore := new(big.Rat).Sub(new(big.Rat).SetInt64(int64(r.tokens)), after)
	room := new(big.Rat).Sub(new(big.Rat).Sub(burst, peak), after)
	if restore.Sign() <= 0 || room.Sign() <= 0 {
		return
	}
	if room.Cmp(restore) < 0 {
		restore = room
	}
	m.peak(tok)
	tok = new(big.Rat).Add(tok, restore)
	if tok.Cmp(burst) > 0 {
		tok.Set(burst)
	}
	m.tokens = tok
	m.update(t)
}

func (m *exactModel) setLimit(t time.Time, l Limit) {
	m.tokens = m.advance(t)
	m.update(t)
	m.setRate(l)
	m.change()
}

func (m *exactModel) setBurst(t time.Time, b int) {
	m.tokens = m.advance(t)
	m.update(t)
	m.burst = b
	m.change()
}

// The fuzz alphabet: rates with at most 10 decimal places below 1.8e9/s (so
// that every rate change keeps the fraction exact, see exact.go), zero and
// Inf; small bursts and counts; steps of time forward and back.
var (
	diffLimits = []Limit{0, 0.5, 1, 3, 10, 100, 0.1, 7.25, 1e6, 2.5e-3, 1e9, Inf, 0.3, 1.0 / 1024, 123.456789}
	diffBursts = []int{0, 1, 2, 3, 5, 10, 1000}
	diffNs     = []int{0, 1, 2, 3, 5, 1, 1, 7}
	diffSteps  = []time.Duration{0, 1, 7, time.Microsecond, 33 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Hour,
		-1, -time.Millisecond, -100 * time.Millisecond, 333333333, 3, 1234567}
)

type diffStats struct{ steps, floatCause, soundCause int }

// runDifferential interprets data as a sequence of calls; see the comment
// at the top of the file.
func runDifferential(t *testing.T, data []byte, st *diffStats) {
	t.Helper()
	if len(data) < 2 {
		return
	}
	// The wall clock's steps are pinned at none: the times below carry no
	// monotonic reading, so since would take a step of the machine's wall
	// clock during the run (a VM's clock synchronisation steps it by a
	// millisecond or more) off them, and x/time/rate, comparing wall
	// times, would not: the two would part by the step's rounding
	// (TestWallStepMixedTimes tests the steps).
	defer func(f func() int64, cur int64) { wallStepNow = f; wallStep.Store(cur) }(wallStepNow, wallStep.Load())
	wallStepNow = func() int64 { return 0 }
	wallStep.Store(0)
	base := time.Now().Round(0) // wall clock only, as the far eras are
	eras := diffEras(base)
	era := 0
	l0, b0 := diffLimits[int(data[0])%len(diffLimits)], diffBursts[int(data[1])%len(diffBursts)]
	mine, x := NewLimiter(l0, b0), xrate.NewLimiter(xrate.Limit(l0), b0)
	es, ex := newExact(l0, b0, true), newExact(l0, b0, false)
	var (
		now      int64 = 1e12
		mineRs   []*Reservation
		xRs      []*xrate.Reservation
		esRs     []*exactReservation
		exRs     []*exactReservation
		diverged bool
		parted   bool // outputs differed once: compare with the exact model only
	)
	tm := func() time.Time { return eras[era].Add(time.Duration(now)) }

	checkState := func(step int, op string) {
		t.Helper()
		got := new(big.Rat).SetFrac(mine.tokens.big(), new(big.Int).SetUint64(max(mine.den, 1)))
		fresh := mine.last == never && !mine.lastFar
		var last, event time.Time
		if !fresh {
			last, event = mine.lastTime(), mine.timeOf(mine.eventWide())
		}
		if got.Cmp(es.tokens) != 0 || fresh != es.fresh || !fresh && (!last.Equal(es.last) || es.evented && !event.Equal(es.lastEvent)) {
			t.Fatalf("step %d %s: state (tokens %v, last %v, lastEvent %v), exact model (%v, %v, %v)",
				step, op, got.FloatString(22), last, event, es.tokens.FloatString(22), es.last, es.lastEvent)
		}
		mine.checkAxis(t)
	}
	for i := 2; i+1 < len(data); i += 2 {
		op, arg := data[i], data[i+1]
		switch k := int(arg >> 4); {
		case k >= len(diffSteps): // a far time: another era
			era = (era + k - len(diffSteps) + 1) % len(eras)
		default:
			now += int64(diffSteps[k])
		}
		st.steps++
		var name string
		var mineOut, xOut, exOut [2]int64 // decision, delay
		switch op % 8 {
		case 0, 1, 2: // AllowN
			n := diffNs[int(arg)%len(diffNs)]
			name = "AllowN"
			mineOut[0], xOut[0] = b2i(mine.AllowN(tm(), n)), b2i(x.AllowN(tm(), n))
			esOut := es.reserve(tm(), n, 0)
			exOut[0] = b2i(ex.reserve(tm(), n, 0).ok)
			if mineOut[0] != b2i(esOut.ok) {
				t.Fatalf("step %d: AllowN(t=%d, %d) = %v, exact model %v", i, now, n, mineOut[0], esOut.ok)
			}
		case 3, 4: // ReserveN, and its delay
			n := diffNs[int(arg)%len(diffNs)]
			name = "ReserveN"
			mr, xr := mine.ReserveN(tm(), n), x.ReserveN(tm(), n)
			er, exr := es.reserve(tm(), n, InfDuration), ex.reserve(tm(), n, InfDuration)
			mineRs, xRs, esRs, exRs = append(mineRs, mr), append(xRs, xr), append(esRs, &er), append(exRs, &exr)
			mineOut = [2]int64{b2i(mr.OK()), int64(mr.DelayFrom(tm()))}
			xOut = [2]int64{b2i(xr.OK()), int64(xr.DelayFrom(tm()))}
			exOut = [2]int64{b2i(exr.ok), exDelay(exr, tm())}
			if want := [2]int64{b2i(er.ok), exDelay(er, tm())}; mineOut != want {
				t.Fatalf("step %d: ReserveN(t=%d, %d) = %v, exact model %v", i, now, n, mineOut, want)
			}
		case 5: // CancelAt of an earlier reservation
			if len(mineRs) == 0 {
				continue
			}
			k := int(arg) % len(mineRs)
			name = "CancelAt"
			mineRs[k].CancelAt(tm())
			xRs[k].CancelAt(tm())
			if es.cancel(esRs[k], tm()) {
				diverged = true
			}
			ex.cancel(exRs[k], tm())
		case 6: // SetLimitAt
			l := diffLimits[int(arg)%len(diffLimits)]
			name = "SetLimitAt"
			mine.SetLimitAt(tm(), l)
			x.SetLimitAt(tm(), xrate.Limit(l))
			es.setLimit(tm(), l)
			ex.setLimit(tm(), l)
		case 7: // SetBurstAt
			b := diffBursts[int(arg)%len(diffBursts)]
			name = "SetBurstAt"
			mine.SetBurstAt(tm(), b)
			x.SetBurstAt(tm(), b)
			es.setBurst(tm(), b)
			ex.setBurst(tm(), b)
		}
		checkState(i, name)
		if parted || mineOut == xOut {
			continue
		}
		parted = true
		if exOut == xOut {
			if !diverged {
				t.Fatalf("step %d %s: this package %v, x/time/rate %v, and x/time/rate's own algorithm in exact arithmetic agrees with x/time/rate: the difference has no documented cause", i, name, mineOut, xOut)
			}
			st.soundCause++
			continue
		}
		// x/time/rate differs from its own algorithm computed exactly: its
		// float64 arithmetic is the cause.
		st.floatCause++
		if testing.Verbose() {
			t.Logf("step %d %s at t=%d: x/time/rate %v, exact %v (this package %v): float rounding", i, name, now, xOut, exOut, mineOut)
		}
	}
}

func exDelay(r exactReservation, t time.Time) int64 {
	if !r.ok {
		return int64(InfDuration)
	}
	return int64(max(r.act.Sub(t), 0))
}

// diffEras are the origins of the differential test's times: its start,
// the zero time.Time, and times 150 to 290 years away from either, so that
// sequences move the limiter's time axis (more than 146 years) and keep
// times more than 292 years (time.Duration's range) apart.
func diffEras(base time.Time) []time.Time {
	const year = 365 * 24 * time.Hour
	return []time.Time{base, {}, base.Add(150 * year), base.Add(-200 * year), time.Time{}.Add(100 * year), base.Add(290 * year)}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func FuzzDifferential(f *testing.F) {
	f.Add([]byte{4, 1, 0, 0x50, 0, 0x50, 0, 0x40, 3, 0x11, 5, 0})
	f.Add([]byte{8, 2, 3, 0x02, 3, 0x02, 6, 0x07, 3, 0x41, 5, 0x00, 0, 0x30})
	f.Add([]byte{11, 3, 3, 0x01, 6, 0x04, 5, 0x00, 0, 0x00, 0, 0x00})
	// Far eras (arg >> 4 of 14 or 15) and the same reservation cancelled
	// again.
	f.Add([]byte{2, 3, 3, 0x01, 5, 0x00, 5, 0x00, 0, 0xE1, 3, 0xF2, 5, 0x01, 5, 0x01, 6, 0xE3, 0, 0x21, 4, 0xF0, 5, 0x02})
	f.Fuzz(func(t *testing.T, data []byte) {
		var st diffStats
		runDifferential(t, data, &st)
	})
}

// TestDifferentialRandom runs many random sequences, reports how often and
// why this package and x/time/rate part, and requires that some sequences
// run long without parting (the comparison is not vacuous).
func TestDifferentialRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var st diffStats
	const seqs = 3000
	for range seqs {
		data := make([]byte, 2+2*rng.IntN(60))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		runDifferential(t, data, &st)
	}
	t.Logf("%d sequences, %d steps: parted from x/time/rate by float rounding in %d, by a sound choice in %d",
		seqs, st.steps, st.floatCause, st.soundCause)
	if st.steps < seqs*20 {
		t.Fatalf("only %d steps compared", st.steps)
	}
}

// TestDifferentialFloatCause pins two differences caused by x/time/rate's
// float64 arithmetic, each checked against the exact answer: a balance, and
// a delay.
func TestDifferentialFloatCause(t *testing.T) {
	base := time.Now()

	// A balance. At 0.1 token/s, ten updates one second apart refill
	// exactly one token; x/time/rate adds 0.1 ten times in float64 and holds
	// 0.9999999999999999. (It still allows the token: the missing 1e-16
	// token converts to a wait under a nanosecond, which truncates to 0.)
	// AllowN(t, 0) is an update that consumes nothing.
	mine, x := NewLimiter(0.1, 1), xrate.NewLimiter(0.1, 1)
	mine.AllowN(base, 1)
	x.AllowN(base, 1)
	for i := 1; i <= 10; i++ {
		ti := base.Add(time.Duration(i) * time.Second)
		mine.AllowN(ti, 0)
		x.AllowN(ti, 0)
	}
	t10 := base.Add(10 * time.Second)
	exact := new(big.Rat).Mul(big.NewRat(1, 10), big.NewRat(10, 1)) // tokens refilled
	if exact.Cmp(big.NewRat(1, 1)) != 0 {
		t.Fatal("exact refill is not one token")
	}
	if got := mine.TokensAt(t10); got != 1 {
		t.Errorf("TokensAt = %v, want exactly 1", got)
	}
	if !mine.AllowN(t10, 1) {
		t.Error("AllowN = false, want true: exactly one token has been refilled")
	}
	if xt := x.TokensAt(t10); xt != 0.9999999999999999 {
		t.Fatalf("x/time/rate holds %v tokens: the float miss this test pins is gone", xt)
	}

	// A delay. At 0.1 token/s with 1 ms of refill, a token is 0.9999 token
	// away: 9.999 s, exactly 9999000000 ns. x/time/rate's float quotient
	// lands a hair below and truncates to 9998999999.
	mine, x = NewLimiter(0.1, 5), xrate.NewLimiter(0.1, 5)
	mine.AllowN(base, 5)
	x.AllowN(base, 5)
	t1 := base.Add(time.Millisecond)
	wantNs := new(big.Rat).Quo(new(big.Rat).Sub(big.NewRat(1, 1), big.NewRat(1, 10000)), big.NewRat(1, 10)) // seconds
	wantNs.Mul(wantNs, big.NewRat(1e9, 1))
	if !wantNs.IsInt() || wantNs.Num().Int64() != 9999000000 {
		t.Fatalf("exact delay %v ns", wantNs)
	}
	if got := mine.ReserveN(t1, 1).DelayFrom(t1); got != 9999000000 {
		t.Errorf("delay %d ns, want exactly 9999000000", got)
	}
	if got := x.ReserveN(t1, 1).DelayFrom(t1); got != 9998999999 {
		t.Fatalf("x/time/rate delay %d ns: the float miss this test pins is gone", got)
	}
}
