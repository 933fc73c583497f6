package shardedbucket

import (
	"math"

	"github.com/admit-go/admit/internal/refill"
)

// A dry bucket has nothing to shard. While it is dry the bucket keeps its
// whole state in one central word, Bucket.c, a GCRA empty point on the
// bucket's stream V with the bucket's capacity (the balance at stream value
// v is min(Cap, v − c)), and every shard is frozen, holding nothing. When
// the central balance has grown again it is dealt back to the shards.
//
// The two representations and the steps between them:
//
//	spread   c == spread; every shard holds its own z (the sharded bucket).
//	central  c is an empty point; every shard's z is frozen.
//	collapse (spread → central) freezes each shard with one Swap, then
//	         reads the clock and sums what the shards hold at that stream
//	         value v, and stores c = v − sum.
//	spread   (central → spread) swaps c to spread, then deals the central
//	         balance at v to the shards, each within its capacity: shard i
//	         gets z = V_i(v) − b_i with Σ b_i the central balance.
//
// Both run under resvMu, which makes them the only writers of a frozen
// shard and of c's mode, so neither ever sees the other half done. A take
// that meets a half-done step finds the shards still frozen (they hold
// nothing), or c already spread while some shards are frozen: it sees
// fewer tokens for that moment, never more.
//
// Why the bound survives the steps. For one shard, the admissions since any
// instant s own disjoint intervals of its stream inside (V_i(s) − cap_i,
// z_i], and what it holds at v is the part of (z_i, V_i(v)] within its
// capacity (negative if a take applied a later reading than v): so what it
// admitted since s plus its balance at v is at most cap_i + V_i(v) − V_i(s),
// negative balances included. Summed over the shards, what the bucket
// admitted since s plus the sum the collapse stores is at most Cap + v −
// V(s), and the central word, a single bucket, admits from v on at most that
// sum plus its refill; a spread hands the shards exactly the central balance
// at v, and each shard then holds no more than its share would have. So a
// window that spans any number of steps still admits at most Cap + rate ×
// its length. No shard ever holds a reservation's debt: reservations are
// made only on the central word (see reserve), and a spread needs a
// balance of spreadAt > 0, which every reservation has come due before.
//
// Why it is cheaper. While central, a dry call loads its home shard (a
// line that, while the shards are frozen, only calls from its own processor
// write, and only standing aside's records, below), then c, and writes c
// only to admit: one shared line, and a rejection writes nothing shared. The spread
// bucket's dry call instead read every shard and took its token from
// whichever shard the refill had dealt it to, so the shards' lines moved
// between the cores on every token.
//
// Hysteresis: a gather that finds less than a token in all the shards
// collapses; a central admission that leaves spreadAt or more spreads (a
// few tokens per shard, at most half the capacity, at least two tokens or
// the capacity), so that between two steps the refill has produced at
// least spreadAt − 1 tokens more than the callers took.
//
// Standing aside. While two or more cores call a dry bucket flat out, they
// race for each token as it appears: the core that takes it must fetch c's
// line, and every other core must fetch it back to see the token gone, two
// line transfers a token at the least, and they are the call's whole cost
// (about 90 ns each on the 2-vCPU machine of docs/benchmarks.md, against a
// token every 167 ns in bench/'s mixed case). A lock avoids them by making
// the losing core wait while the winner admits a run of calls alone. This
// bucket makes the losing core stand aside instead. The rules, all kept in
// the caller's home shard (see shard):
//
//   - A home loses when a central CAS from it fails: another processor
//     moved c between its load and its CAS. For asideRecord stands' worth
//     of stream after that (lostUntil), it counts c moving away from seen
//     as another lost race: seen is c as the home's own calls last left
//     it (admissions, reservations, undos) or as its last stand found it.
//   - A central call from a home that lost, in this call or within its
//     record, and that is left with less than a token stands the home
//     aside: until the stream has advanced asideUnits past its reading (a
//     microsecond of refill, at most 8 tokens, at most what the capacity
//     holds above one token), dry calls from that home are refused without
//     loading c. The other core admits a run of tokens with the line in
//     its own cache; the aside core's refusals load only its own home's
//     line.
//   - Turns: once c has moved asideRun tokens since a home's run began
//     (runFrom: the collapse, its last stand or its last look), the next
//     admission from it that leaves less than a token looks at the other
//     homes. If one stands aside after losing a race, its processor is
//     waiting, and this home stands aside to give it the next tokens; if
//     none does, nobody is waiting, its record of losing is cleared and a
//     new run begins. A stand that gives a turn is owed none (the lowest
//     unit of a stand's end says which kind it is), so turns do not chain
//     once nobody loses. The tokens go to one core in runs of about
//     asideRun, whether or not that core ever lost a race.
//
// What standing aside gives up and what it keeps. A refusal while aside is
// not exact: the bucket may hold tokens (less than one more than asideUnits
// of refill) that a call from another home would get. It admits nothing, so
// the window bound is untouched. It discards no refill: a stand begins with
// less than a token in the bucket and lasts at most what the capacity holds
// above one token, so the bucket cannot fill up, and lose refill to its
// cap, before the stand ends (unless a reservation's undo gives tokens back
// meanwhile, or the stand was decided in a dry spell that has ended and
// written after the next collapse); what the aside home did not take is
// still there for the next call. A caller alone on the bucket since its last collapse never stands
// aside, whichever processor it runs on: only a concurrent call can fail
// its CAS, and no other home stands aside to take a turn. A caller left
// alone after contention stands aside only while a record of losing lasts:
// on one processor at most twice, its own AcquireN calls included (once on
// finding the others' last moves of c, since its own are the ones it last
// left, and once to give a turn to a core still waiting as it left; the
// turn's look after that finds nobody and clears the record), and on
// processors it migrates between, each finding c moved by the others, not
// after asideRecord stands past the last lost race. Every record is
// cleared by a collapse. The blocking path is exact: a reservation whose
// take was refused while aside reserves on c itself, and gets the tokens
// at once if they are there. The price is fairness between cores at the
// scale of microseconds (the runs); over a second the shares even out
// (bench/cmd/dryshare, three runs of bench/'s mixed case on two cores).
// Where homes are not the processors (admit_purego), nobody stands aside.
const (
	// spread is c's value while the shards hold the state. A central empty
	// point is never below −Cap > MinInt64.
	spread = math.MinInt64

	// frozen is a frozen shard's z: above any stream value (V <= 2^62), so
	// the shard's balance is below −2^61 and no take or gather ever
	// changes it, and below MaxInt64 − 2^61, so no sum with a capacity
	// overflows.
	frozen = 3 << 61

	// spreadTokens is how many tokens per shard the central word must hold
	// before it is dealt out again (at most half the capacity).
	spreadTokens = 16

	// asideNanos and asideTokens bound how long a home stands aside: a
	// microsecond of refill, and no more than eight tokens of it.
	asideNanos  = 1000
	asideTokens = 8

	// asideRun is how many tokens a home's run takes from the central
	// word before it gives a turn to a home that stands aside
	// (Bucket.asideRun, in units; tests lower it).
	asideRun = 16

	// asideRecord is how long, in stands, a home that lost the central
	// word counts c's moves by others as lost races (shard.lostUntil).
	asideRecord = 64
)

// spreadThreshold returns spreadAt for a bucket of capacity capUnits, one
// token being one units, over n shards.
func spreadThreshold(capUnits, one int64, n int) int64 {
	per := min(capUnits/2, int64(n)*spreadTokens*one)
	return min(capUnits, max(2*one, per))
}

// takeCentral takes need units from the central word, whose value the
// caller loaded as c (an empty point, not spread), at stream value v. It
// reports whether it did. An admission that leaves spreadAt or more spreads
// the bucket again. If c turns to spread meanwhile, it takes from the
// shards as a gather from start would. A call left with less than a token
// after losing the word to another core, or after finding it moved since
// its home last lost and left it, stands its home aside, and an admission
// that ends a run gives a waiting home its turn (see "Standing aside"
// above).
func (b *Bucket) takeCentral(need, v, c int64, start uint) bool {
	h := &b.shards[start&b.mask]
	lost := false
	for {
		base := max(c, v-b.p.Cap) // refill beyond the capacity is discarded
		if v-base < need {
			if v-base < b.p.Units(1) && b.asideUnits > 0 &&
				(lost || (v < h.lostUntil.Load() && h.seen.Load() != c)) {
				b.standAside(h, v, c, true)
			}
			return false // loads only, unless standing aside
		}
		if testHookCentral != nil {
			testHookCentral(b, v, start)
		}
		if b.c.CompareAndSwap(c, base+need) {
			if b.asideUnits > 0 {
				// admitted's common case, written out, loads only: a
				// home with no record of losing, short of a turn's check.
				if lost || v < h.lostUntil.Load() || base+need-h.runFrom.Load() >= b.asideRun {
					b.admitted(h, v, base+need, lost)
				}
			}
			if v-base-need >= b.spreadAt {
				b.spread(v)
			}
			return true
		}
		if !lost && b.asideUnits > 0 {
			h.lostUntil.Store(v + asideRecord*b.asideUnits)
		}
		lost = true
		if c = b.c.Load(); c == spread {
			return b.gather(need, v, start)
		}
	}
}

// standAside stands home h aside from stream value v, its call having
// found the central word at c with less than a token. lost reports that the
// stand follows a lost race, so that the home is owed a turn, rather than
// giving one; the stand's end says which by its lowest unit, odd if owed
// (a unit more or less, which the span's bound leaves room for: see
// spanOf).
func (b *Bucket) standAside(h *shard, v, c int64, lost bool) {
	h.seen.Store(c)
	h.runFrom.Store(c)
	end := (v + b.asideUnits) &^ 1
	if lost {
		end |= 1
	}
	h.aside.Store(end)
}

// admitted keeps home h's record after a central admission at stream value
// v that left the central word at c; lost reports whether the call lost the
// word first. Once the central word has moved asideRun units since h's run
// began (while another home stands aside, by h's admissions alone), the
// first admission that leaves less than a token looks at the other homes:
// if one stands aside after losing a race, its processor is waiting for a
// turn, and h stands aside to give it one; if none does, nobody is waiting
// on h, h's record of losing is cleared and a new run begins.
func (b *Bucket) admitted(h *shard, v, c int64, lost bool) {
	if lost || v < h.lostUntil.Load() {
		h.seen.Store(c)
	}
	if c-h.runFrom.Load() < b.asideRun || v-c >= b.p.Units(1) {
		return
	}
	if b.othersWaiting(h, v) {
		b.standAside(h, v, c, false)
		return
	}
	h.runFrom.Store(c)
	h.lostUntil.Store(0)
}

// leftBy records, for a home start whose record of losing holds at stream
// value v, that its own call has just moved c (a reservation or its undo),
// so that the home does not count the move as a lost race. Loaded after the
// move, c may include another processor's too: that costs at most a stand
// not taken.
func (b *Bucket) leftBy(start uint, v int64) {
	if h := &b.shards[start&b.mask]; v < h.lostUntil.Load() {
		h.seen.Store(b.c.Load())
	}
}

// othersWaiting reports whether a home other than h stands aside at
// stream value v after losing a race: one that stands aside to give a turn
// is owed none. It loads every shard's line.
func (b *Bucket) othersWaiting(h *shard, v int64) bool {
	for i := range b.shards {
		if s := &b.shards[i]; s != h {
			if a := s.aside.Load(); v < a && a&1 != 0 {
				return true
			}
		}
	}
	return false
}

// testHookCentral, set by tests only, runs in takeCentral just before its
// CompareAndSwap, with the stream value and the start shard: a test takes
// there from another home, as a concurrent caller on another core would, to
// make the call lose the central word on demand. It costs an admission one
// load of a word that is never written outside tests.
var testHookCentral func(b *Bucket, v int64, start uint)

// tryCollapse collapses the bucket if it is spread and resvMu is free; it
// never waits for the mutex (a reservation, a put-back or another step
// holds it, and the next dry call will try again).
func (b *Bucket) tryCollapse() {
	if !b.resvMu.TryLock() {
		return
	}
	if b.c.Load() == spread {
		b.collapse()
	}
	b.resvMu.Unlock()
}

// testHookStep, set by tests only, runs inside collapse after each shard
// is frozen and inside spread after c is spread and after each shard is
// dealt its share, with the shard's index (-1 for c): a test takes there,
// as a concurrent caller would, to meet the half-done step. It runs with
// resvMu held.
var testHookStep func(b *Bucket, i int)

// collapse moves the shards' state into the central word, and returns the
// clock reading it summed them at. It requires resvMu held and c == spread,
// so every shard holds its own z.
//
// It freezes every shard first and reads the clock after the last freeze:
// every take a shard applied came before its freeze, so its reading is no
// later than this one, and each shard's balance at it is what the shard
// had left, in full (the bound's argument in the file comment needs that).
// Summed at an earlier reading, a take applied at a later one would count
// as refill spent in advance, and the shards' unspent refill from then on
// would be handed out a second time by the central word.
func (b *Bucket) collapse() int64 {
	var zBuf [64]int64
	zs := b.scratch(zBuf[:])
	for i := range b.shards {
		// After the swap no take can move z: a frozen shard holds nothing,
		// and a take's CAS compares with the z it loaded.
		zs[i] = b.shards[i].z.Swap(frozen)
		// A new dry spell: no home has lost a race in it yet. A call
		// that loaded c in the last one may still write them: harmless,
		// every stand being decided on its own reading and c (see shard).
		b.shards[i].lostUntil.Store(0)
		b.shards[i].aside.Store(0)
		if testHookStep != nil {
			testHookStep(b, i)
		}
	}
	now := b.clk.Now()
	v := b.p.V(now)
	var sum int64
	for i := range b.shards {
		s := &b.shards[i]
		vi := b.g.vi(s, v)
		// Not clamped at zero: on a clock that runs backwards a take may
		// have applied a later reading, and the sum must count it.
		sum += vi - max(zs[i], vi-s.cap)
	}
	for i := range b.shards {
		b.shards[i].runFrom.Store(v - sum) // every home's run begins here
	}
	b.c.Store(v - sum)
	b.epoch.Add(1)
	return now
}

// spread deals the central balance at stream value v back to the shards if
// it is at least spreadAt and resvMu is free (it never waits for it).
func (b *Bucket) spread(v int64) {
	if !b.resvMu.TryLock() {
		return
	}
	defer b.resvMu.Unlock()
	c := b.c.Load()
	if c == spread {
		return
	}
	bal := v - max(c, v-b.p.Cap)
	// A concurrent take that won the swap below changed c: leave it, the
	// next admission that leaves enough spreads.
	if bal < b.spreadAt || !b.c.CompareAndSwap(c, spread) {
		return
	}
	if testHookStep != nil {
		testHookStep(b, -1)
	}
	// Whole tokens in turn, so that a shard holds fractions only if the
	// balance does; then what is left (the fraction, or what a shard had
	// no room for) to the first shards with room. Every share is within
	// its shard's capacity and the shares add up to bal <= Cap.
	one := b.p.Units(1)
	n := int64(len(b.shards))
	each, extra := bal/one/n, bal/one%n
	share := func(i int) int64 {
		t := each
		if int64(i) < extra {
			t++
		}
		return min(b.shards[i].cap, t*one)
	}
	left := bal
	for i := range b.shards {
		left -= share(i)
	}
	for i := range b.shards {
		s := &b.shards[i]
		got := share(i)
		more := min(s.cap-got, left)
		left -= more
		// Only the step that froze a shard writes it until it is dealt
		// its share; a Store is enough.
		s.z.Store(b.g.vi(s, v) - got - more)
		if testHookStep != nil {
			testHookStep(b, i)
		}
	}
	b.epoch.Add(1)
}

// asideSpan returns how long a home stands aside, in units of the stream:
// asideNanos of refill, at most asideTokens, and at most what the capacity
// holds above one token, so that a bucket left with less than a token when
// the stand begins cannot fill up before it ends.
// It is 0, and no home ever stands aside, where homes are not the
// processors (admit_purego: see home_purego.go).
func asideSpan(p *refill.Params) int64 {
	if !homeIsProcessor {
		return 0
	}
	return spanOf(p)
}

// spanOf is asideSpan where homes are processors. A stand's end may lie a
// unit past its reading plus the span (its lowest unit marks its kind);
// begun with at most a token less a unit, the bucket holds at most a token
// plus the span, Cap, when the stand ends: it has not filled meanwhile.
func spanOf(p *refill.Params) int64 {
	return max(0, min(p.V(asideNanos), p.Units(asideTokens), p.Cap-p.Units(1)))
}
