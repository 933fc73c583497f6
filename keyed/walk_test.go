package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/internal/refill"
	"github.com/admit-go/admit/keyed"
)

// ---- exact window checker with per-event allowances -------------------------

// rwin checks P(j) − P(<i) − rate·(hi_j − lo_i) − (X_j − X_i) <= Cap + 1
// over admissions of one (key, Name) in which the Name's Capacity and Rate
// did not change; X is a running sum of allowances (tokens) granted by
// documented exceptions (an eviction: one burst).
type rwin struct {
	lim   admit.Limit
	rate  *big.Rat // tokens per ns
	total int64
	extra int64
	best  *big.Rat
	first int64 // lo of the window's first admission (for reports)
	log   []string
}

func ratOf(f float64) *big.Rat {
	r, _ := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	return r
}

func newRwin(lim admit.Limit) *rwin {
	r := ratOf(lim.Rate)
	return &rwin{lim: lim, rate: r.Quo(r, big.NewRat(1e9, 1))}
}

// admit returns the excess over the bound (<= 0 is fine).
func (w *rwin) admit(lo, hi, n int64) *big.Rat {
	at := func(t int64) *big.Rat {
		v := new(big.Rat).SetInt64(w.total - w.extra)
		return v.Sub(v, new(big.Rat).Mul(w.rate, new(big.Rat).SetInt64(t)))
	}
	if s := at(lo); w.best == nil || s.Cmp(w.best) < 0 {
		w.best = s
	}
	w.total += n
	ex := at(hi)
	ex.Sub(ex, w.best)
	return ex.Sub(ex, big.NewRat(w.lim.Capacity+1, 1))
}

// ---- exact reference bucket (forward clock only) ------------------------------

type rref struct {
	lim  admit.Limit
	unit *big.Rat // one unit of the limiter's arithmetic, in tokens
	bal  *big.Rat // tokens
	at   int64
	tol  *big.Rat // rounding accumulated (units), tokens
}

func unitOf(lim admit.Limit) *big.Rat {
	p, err := refill.NewParams(lim.Capacity, lim.Rate)
	if err != nil {
		panic(err)
	}
	return new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Lsh(big.NewInt(1), p.Shift))
}

func newRref(lim admit.Limit, t int64) *rref {
	u := unitOf(lim)
	return &rref{lim: lim, unit: u, bal: new(big.Rat).SetInt64(lim.Capacity), at: t, tol: new(big.Rat).Mul(u, big.NewRat(2, 1))}
}

func (r *rref) advance(t int64) {
	if t <= r.at {
		return
	}
	rate := ratOf(r.lim.Rate)
	rate.Quo(rate, big.NewRat(1e9, 1))
	add := new(big.Rat).Mul(rate, new(big.Rat).SetInt64(t-r.at))
	r.bal.Add(r.bal, add)
	if c := new(big.Rat).SetInt64(r.lim.Capacity); r.bal.Cmp(c) > 0 {
		r.bal = c
	}
	r.at = t
}

// full: within rounding of the capacity.
func (r *rref) full() bool {
	c := new(big.Rat).SetInt64(r.lim.Capacity)
	return c.Sub(c, r.bal).Cmp(r.tol) <= 0
}

func (r *rref) change(lim admit.Limit, t int64) {
	r.advance(t)
	if r.full() {
		*r = *newRref(lim, t)
		return
	}
	c := new(big.Rat).SetInt64(lim.Capacity)
	if r.bal.Cmp(c) > 0 {
		r.bal = c
	}
	r.lim = lim
	r.unit = unitOf(lim)
	r.tol.Add(r.tol, new(big.Rat).Mul(r.unit, big.NewRat(2, 1)))
}

// ---- the walk ------------------------------------------------------------------

type walkCfg struct {
	forward  bool // the clock never steps back: the exact reference applies
	refuse   bool
	maxKeys  int
	shards   int
	primary  admit.Limit
	variants map[string][]admit.Limit // Name → its (Capacity, Rate) variants; [0] of "" is primary
	names    []string
	keys     []string
}

type rkey struct {
	latest int64 // latest reading of a call on the key (elapsed)
	wins   map[string]*rwin
	refs   map[string]*rref
	held   bool
	multi  bool
}

var walkRates = []float64{0.5, 1.0 / 3, 1, 3, 7.3, 1000, 1e5, 0, 1e-6, 2.5}

func randLimit(rng *rand.Rand, name string) admit.Limit {
	return admit.Limit{Name: name, Capacity: int64(rng.IntN(6)) + 1, Rate: walkRates[rng.IntN(len(walkRates))]}
}

type walkFail struct{ msg string }

// walkStats counts what the walks exercised (single goroutine).
var walkStats = map[string]int{}

// runWalk runs one random sequence and returns nil or a description of the
// first violation together with the trace that led to it.
func runWalk(seed uint64, nops int, forceForward int) (fail error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cfg := walkCfg{
		forward: rng.IntN(2) == 0,
		refuse:  rng.IntN(2) == 0,
		maxKeys: rng.IntN(4) + 1,
		shards:  1 << rng.IntN(2),
	}
	if forceForward == 1 {
		cfg.forward = true
	} else if forceForward == 0 {
		cfg.forward = false
	}
	if cfg.shards > cfg.maxKeys {
		cfg.shards = 1
	}
	cfg.names = []string{"", "a", "b", "c", "d"}[:2+rng.IntN(4)]
	cfg.variants = map[string][]admit.Limit{}
	for _, nm := range cfg.names {
		for range 1 + rng.IntN(3) {
			cfg.variants[nm] = append(cfg.variants[nm], randLimit(rng, nm))
		}
	}
	cfg.primary = cfg.variants[""][0]
	cfg.keys = []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}[:cfg.maxKeys+1+rng.IntN(3)]

	var trace []string
	tr := func(format string, a ...any) { trace = append(trace, fmt.Sprintf(format, a...)) }
	defer func() {
		if r := recover(); r != nil {
			wf, ok := r.(walkFail)
			if !ok {
				panic(r)
			}
			start := max(0, len(trace)-60)
			fail = fmt.Errorf("seed %d cfg %+v\n%s\nlast ops:\n  %s", seed, cfg, wf.msg, strings.Join(trace[start:], "\n  "))
		}
	}()
	failf := func(format string, a ...any) { panic(walkFail{fmt.Sprintf(format, a...)}) }

	const t0 = 1_000_000
	clk := buckettest.NewFakeClock(t0)
	policy := keyed.EvictLRU
	if cfg.refuse {
		policy = keyed.RefuseNew
	}
	l, err := keyed.New(cfg.primary.Capacity, cfg.primary.Rate, admit.WithClock(clk),
		keyed.WithMaxKeys(cfg.maxKeys), keyed.WithShards(cfg.shards), keyed.WithPolicy(policy))
	if err != nil {
		failf("New: %v", err)
	}
	l.FixHash(seed) // the keys are short: their layout replays from the seed
	elapsed := func() int64 { return min(max(clk.Now()-t0, 0), refill.Horizon) }
	keys := map[string]*rkey{}
	for _, k := range cfg.keys {
		keys[k] = &rkey{wins: map[string]*rwin{}, refs: map[string]*rref{}}
	}
	global := int64(0) // latest reading of all
	ctx := context.Background()

	// do makes one call and does every piece of bookkeeping.
	do := func(key string, n int64, lims []admit.Limit, viaN bool) (admit.Decision, error) {
		r := elapsed()
		global = max(global, r)
		km := keys[key]
		stats := l.Stats()
		wasMulti := km.held && l.IsMulti(key)
		var d admit.Decision
		var err error
		if viaN {
			d, err = l.AllowN(ctx, key, n)
		} else {
			d, err = l.AllowLimits(ctx, key, n, lims...)
		}
		tr("t=%d %s n=%d lims=%v viaN=%v -> %+v err=%v", r, key, n, lims, viaN, d, err)
		now := l.Stats()
		evs := now.Evictions - stats.Evictions
		walkStats["calls"]++
		walkStats["evictions"] += int(evs)
		walkStats["drops"] += int(now.Drops - stats.Drops)
		walkStats["refusals"] += int(now.Refusals - stats.Refusals)
		if err == nil && n > 0 {
			if d.Allowed {
				walkStats["admissions"]++
			} else {
				walkStats["denials"]++
			}
		}
		if err != nil && !errors.Is(err, admit.ErrUnavailable) {
			walkStats["badcalls"]++
		}
		if evs > 1 {
			failf("%d evictions in one call", evs)
		}
		if cfg.refuse && evs > 0 {
			failf("RefuseNew evicted")
		}
		if n == 0 && !d.Allowed && err == nil {
			failf("peek denied: %+v", d)
		}
		// Bad calls touch nothing.
		if err != nil && !errors.Is(err, admit.ErrUnavailable) {
			if now != stats {
				failf("bad call changed stats %+v -> %+v", stats, now)
			}
		}
		// Removals.
		var removedLive []string
		for _, k := range cfg.keys {
			o := keys[k]
			if !o.held || l.Held(k) {
				continue
			}
			o.held = false
			live := true
			if cfg.forward {
				live = false
				for _, rf := range o.refs {
					rf.advance(r)
					if !rf.full() {
						live = true
					}
				}
			}
			tr("   removed %s (live by reference: %v, multi %v)", k, live, o.multi)
			if live {
				removedLive = append(removedLive, k)
			}
			o.refs = map[string]*rref{}
		}
		if cfg.forward && len(removedLive) > int(evs) {
			failf("keys %v with buckets not full forgotten, evictions in call: %d", removedLive, evs)
		}
		if evs > 0 {
			// The evicted client restarts full: one burst more in its windows.
			// (Backward clock: we cannot tell which was evicted; grant to all removed.)
			for _, k := range removedLive {
				o := keys[k]
				grant := int64(1)
				if !cfg.forward && !o.multi && r < o.latest {
					grant = 2 // the documented backward-clock exception: up to one burst more
				}
				for _, w := range o.wins {
					w.extra += grant * w.lim.Capacity
				}
			}
		}
		for _, k := range removedLive {
			keys[k].multi = false
		}
		for _, k := range cfg.keys {
			if keys[k].held == false {
				keys[k].multi = false
			}
		}
		// The call's limits bring window changes.
		brought := lims
		if viaN {
			brought = []admit.Limit{cfg.primary}
		}
		if err != nil && !errors.Is(err, admit.ErrUnavailable) {
			brought = nil // validation or n errors: nothing carried
		}
		heldNow := l.Held(key)
		isMulti := heldNow && l.IsMulti(key)
		converted := km.held && !wasMulti && isMulti
		if converted {
			walkStats["conversions"]++
			if r < km.latest {
				walkStats["staleconversions"]++
			}
		}
		for _, lim := range brought {
			if w := km.wins[lim.Name]; w != nil && w.lim != lim {
				walkStats["limitchanges"]++
				tr("   window of %s/%q restarts: %+v -> %+v", key, lim.Name, w.lim, lim)
				delete(km.wins, lim.Name)
			}
		}
		if converted && !cfg.forward && r < km.latest {
			for _, lim := range brought {
				if w := km.wins[lim.Name]; w != nil {
					w.extra += lim.Capacity
				}
			}
		}
		// Reference (forward clock).
		if cfg.forward && err == nil && heldNow || (cfg.forward && err == nil && n > 0 && d.Allowed) {
			pred := true
			for _, lim := range brought {
				rf := km.refs[lim.Name]
				if rf == nil {
					continue
				}
				if rf.lim != lim {
					rf.change(lim, r)
				} else {
					rf.advance(r)
				}
				if rf.bal.Cmp(new(big.Rat).SetInt64(n)) < 0 {
					pred = false
				}
			}
			if d.Allowed && n > 0 {
				for _, lim := range brought {
					rf := km.refs[lim.Name]
					if rf == nil {
						rf = newRref(lim, r)
						km.refs[lim.Name] = rf
					}
					rf.bal.Sub(rf.bal, new(big.Rat).SetInt64(n))
					neg := new(big.Rat).Neg(rf.tol)
					if rf.bal.Cmp(neg) < 0 {
						f, _ := rf.bal.Float64()
						failf("admitted beyond the reference: %s/%q balance %.9f tokens after taking %d (limit %+v)", key, lim.Name, f, n, lim)
					}
				}
			}
			_ = pred
		}
		// Windows.
		if d.Allowed && n > 0 && err == nil {
			lo := max(r, km.latest)
			for _, lim := range brought {
				w := km.wins[lim.Name]
				if w == nil {
					w = newRwin(lim)
					w.first = lo
					km.wins[lim.Name] = w
				}
				w.log = append(w.log, fmt.Sprintf("%d@[%d,%d]", n, lo, global))
				if ex := w.admit(lo, global, n); ex.Sign() > 0 {
					f, _ := ex.Float64()
					failf("window bound broken for %s/%q (%+v) by %.6f tokens; admissions (n@[lo,hi]) in window: %v extra=%d", key, lim.Name, lim, f, w.log, w.extra)
				}
			}
		}
		if heldNow && !km.held {
			km.multi = false
		}
		km.held = heldNow
		km.multi = isMulti
		if err == nil { // bad calls and refusals apply no time to the key
			km.latest = max(km.latest, r)
		}
		// Every key's held state as Held says (removal detection relies on it).
		for _, k := range cfg.keys {
			if keys[k].held != l.Held(k) {
				failf("key %s appeared without a call", k)
			}
		}
		if l.Len() > cfg.maxKeys {
			failf("Len %d above bound", l.Len())
		}
		return d, err
	}

	pickLims := func() []admit.Limit {
		var out []admit.Limit
		for _, nm := range cfg.names {
			if rng.IntN(2) == 0 {
				v := cfg.variants[nm]
				out = append(out, v[rng.IntN(len(v))])
			}
		}
		if len(out) == 0 {
			out = append(out, cfg.primary)
		}
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	}

	for range nops {
		switch op := rng.IntN(100); {
		case op < 15:
			clk.Advance(time.Duration(rng.Int64N(2_000_000_000)))
			tr("advance -> %d", elapsed())
		case op < 20:
			clk.Advance(time.Duration(rng.Int64N(1_000)))
			tr("advance small -> %d", elapsed())
		case op < 22:
			clk.Advance(time.Duration(rng.Int64N(int64(365 * 24 * time.Hour))))
			tr("long idle -> %d", elapsed())
		case op < 28:
			if !cfg.forward {
				clk.Advance(-time.Duration(rng.Int64N(3_000_000_000)))
				tr("BACK -> %d (raw %d)", elapsed(), clk.Now()-t0)
			}
		default:
			key := cfg.keys[rng.IntN(len(cfg.keys))]
			viaN := rng.IntN(3) == 0
			lims := []admit.Limit{cfg.primary}
			if !viaN {
				lims = pickLims()
				if rng.IntN(40) == 0 && len(lims) > 0 { // a bad call: a duplicate Name
					lims = append(lims, lims[0])
				}
			}
			minCap := lims[0].Capacity
			for _, lm := range lims {
				minCap = min(minCap, lm.Capacity)
			}
			n := rng.Int64N(minCap+3) - 1 // -1 .. minCap+1
			if rng.IntN(4) == 0 {
				n = 0
			}
			check := rng.IntN(2) == 0 && n > 0 && n <= minCap && !hasDup(lims)
			var before []admit.Decision
			if check {
				for _, lm := range lims {
					d, err := do(key, 0, []admit.Limit{lm}, false)
					if err != nil {
						failf("peek error %v", err)
					}
					before = append(before, d)
				}
			}
			d, err := do(key, n, lims, viaN)
			_ = err
			if check && (!d.Allowed) {
				walkStats["aon-checked"]++
				for i, lm := range lims {
					a, err := do(key, 0, []admit.Limit{lm}, false)
					if err != nil {
						failf("peek error %v", err)
					}
					if a != before[i] {
						failf("all or nothing: a denial (err %v) changed %s/%q: peek before %+v, after %+v", err, key, lm.Name, before[i], a)
					}
				}
			}
		}
	}
	return nil
}

func hasDup(lims []admit.Limit) bool {
	for i := range lims {
		for j := 0; j < i; j++ {
			if lims[i].Name == lims[j].Name {
				return true
			}
		}
	}
	return false
}

func walkCount(def int) int {
	if s := os.Getenv("KEYED_WALKS"); s != "" {
		n, _ := strconv.Atoi(s)
		return n
	}
	return def
}

// TestModelWalk: 500 seeded random walks of 300 calls each (KEYED_WALKS and
// KEYED_WALK_BASE choose others; a walk replays from its seed, the keys'
// hash secrets included) on a fake clock that steps forward, by a
// nanosecond, by up to a year, and in half the walks backwards; under
// EvictLRU or RefuseNew, WithMaxKeys 1 to 4 over more keys, 1 or 2 shards;
// AllowN and AllowLimits over random subsets and versions of 2 to 5 Names
// (Names added, dropped, their capacity and rate changed), peeks, costs
// from -1 to capacity+1, bad calls. After every call it checks, per (key,
// Name), every window of admissions within one version of the limit against
// capacity + rate × window + 1 (plus one burst per eviction, and on a
// backward clock one per stale eviction or conversion, as docs/keyed.md
// allows); on a forward clock, that no balance exceeds an exact reference
// bucket that follows the documented carry-over; that a key forgotten with
// buckets not full was that call's one eviction, none under RefuseNew, the
// key count within its bound, bad calls changing nothing; and that a denial
// or refusal leaves every Name exactly as it was (each peeked alone before
// and after at the same reading). The checks fail on a limit change that
// refills to full, on dropping buckets a unit short of full, and on a
// denial that takes from the Names that had enough (each injected and
// reverted when the walk was written).
func TestModelWalk(t *testing.T) {
	base := uint64(1)
	if s := os.Getenv("KEYED_WALK_BASE"); s != "" {
		b, _ := strconv.ParseUint(s, 10, 64)
		base = b
	}
	n := walkCount(500)
	fails := 0
	for i := range n {
		if err := runWalk(base+uint64(i), 300, -1); err != nil {
			fails++
			if fails <= 3 {
				t.Error(err)
			}
		}
	}
	t.Logf("%d walks, %d failed; %v", n, fails, walkStats)
}
