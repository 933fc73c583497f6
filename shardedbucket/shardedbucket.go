// Package shardedbucket implements a token bucket split into cache-line
// padded shards, each a single atomic word, with an exact global bound.
//
// Capacity and rate are divided among a power-of-two number of shards in
// integer units of 2^-k tokens, so that the parts add up exactly to the whole
// (100 tokens over 8 shards is 12.5 tokens each, exactly). The rate is split
// without remainder too: the bucket's refill stream V is dealt to the shards
// in blocks of one token (smaller where a shard holds less than four), in
// turn (block b goes to shard b modulo the shard count), so the shards together refill exactly as fast as one bucket would,
// and a token that appears appears whole, in one shard. Dealing single units
// in turn, as this package first did, kept every shard at a fraction of a
// token whenever the bucket ran dry, so that every admission had to gather
// fractions from all the shards: on two cores that made a contended,
// nearly dry bucket twice as slow.
//
// A shard stores one int64, z: the point on its refill stream at which it
// would be empty. Its balance at time t is min(cap_i, V_i(t) − z); taking u
// units is one CompareAndSwap of z to max(z, V_i(t) − cap_i) + u. Time lives
// in V, a pure function of the clock, so one word holds the whole state: no
// allocation, no lock, and a stale clock reading can only see fewer tokens.
//
// Time. A shard keeps no timestamp: its balance is a function of the clock
// reading. A reading older than one a shard has already applied sees the
// smaller balance of that earlier moment, never more, and a rejection stores
// nothing. The shards share no clock word (keeping one would be a shared
// write on every call), so a stale reading can take from a shard that has not
// seen the later reading as if it had arrived at its own time; every shard,
// and so the bucket, still never admits more than its share of capacity +
// rate × elapsed. mutexbucket and casbucket instead treat a stale reading as
// the latest one applied.
//
// A caller starts at its home shard, picked from the processor (P) it runs
// on, so that goroutines on different cores touch different cache lines and
// an admission writes no shared word other than its own shard's. If the home
// shard is short, the caller first sums every shard with loads only; if the
// sum is short too it rejects, having written nothing to any shard. While the
// bucket is dry (the shards together hold less than a token) it rejects
// sooner: the first gather to find it dry publishes the stream value before
// which no token can exist, and until then a caller whose home shard is
// short rejects after reading that one word instead of every shard. Otherwise,
// if one shard holds enough (in a dry bucket, the shard the last token was
// dealt to), it takes from that one, the fullest, alone; only when none does
// it gathers the units from several shards, fractions included, and if a
// concurrent caller won the race for them it rejects, putting back what it
// took into every shard nobody else has touched since (a put-back after
// another take could resurrect refill the cap had discarded, so it is
// dropped instead), unless a reservation was made meanwhile.
//
// Lock order. An admission takes no lock unless a gather loses its race.
// One mutex, resvMu, serialises the steps that must not interleave with a
// reservation's plan: planning and committing a reservation (AcquireN when
// it must wait), undoing one, and a lost gather's put-back. It is a leaf.
// While it is held the bucket only loads and swaps shard and counter
// words, computes, allocates the reservation and reads the Clock's Now (a
// Clock must not call back into the bucket); it never sleeps, never takes
// another lock of its own, and never runs the take path (takeAt, gather),
// since a gather that loses its race locks resvMu to put back. So AcquireN
// tries to take before it locks, and if the plan then finds the tokens
// there after all, it unlocks and takes them as TryAcquire does.
//
// The bound: never more than capacity + rate × elapsed (+1 unit for
// rounding), under any concurrency. A shard that is full while its siblings
// are not discards its share of the refill, which one bucket would have
// kept. When demand reaches every shard, as when the bucket is kept drained
// (a caller asking at every whole token), this costs at most a token per
// shard; but demand concentrated on some shards (a single caller draining
// only its home shard while the others sit full) can leave up to
// (1 − 1/shards) of the capacity missing from a later burst that
// mutexbucket would give. Its decisions then diverge from mutexbucket's both
// ways, but never beyond capacity + rate × T in any window T. Keeping
// the shards level on every call would need a shared write or a read of
// every shard, which is what sharding exists to avoid; gathers do level
// them (see level).
//
// Pick it when many cores admit from one bucket at high rates: admissions
// proceed in parallel instead of bouncing one cache line between cores, and
// it stays fast when demand outruns the rate (on two cores, 0.67× the cost
// of mutexbucket when a fifth of the calls are admitted, 0.35× when nearly
// all are rejected). Its costs are memory (a cache line per shard), one
// goroutine alone on a bucket of many shards (most of its admissions come
// from other shards: 1.12× mutexbucket's cost with 2 shards, 2× with 8), and
// the burst caveat above. See the README for measured numbers.
package shardedbucket

import (
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
)

// shard is one cache line: z is written by admissions, cap and off are
// read-only and ride along on the same line for free.
type shard struct {
	z   atomic.Int64 // empty point on this shard's stream: balance = min(cap, V_i(now) - z)
	cap int64        // this shard's capacity in units; immutable
	off int64        // (shards-1-i) << blockShift: see geometry.vi; immutable
	_   [unsafe.Sizeof(cpu.CacheLinePad{}) - 24]byte
}

// geometry is how the refill stream is dealt to the shards: in blocks of one
// token, shard i receiving block β when β mod shards == i. Where a shard
// holds less than four tokens the blocks are smaller, at most a quarter of a
// shard's capacity: a reservation takes from each shard at most its
// capacity, and with blocks that large a shard's share of a long
// reservation could exceed it by a block (see Bucket's Fairness). Immutable.
type geometry struct {
	block      int64 // units in a block: one token
	blockShift uint  // log2(block)
	roundShift uint  // log2(block * shards)
	roundMask  int64 // block*shards - 1
	last       int64 // (shards-1) * block: where a round's last block starts
}

// vi is shard s's stream at bucket-wide stream value v: the units u < v
// whose block is s's. It is monotone in v and the shards' sum to v exactly.
// Shifted by s.off, shard i's blocks are the last of each round, so it
// counts the whole rounds below x = v + s.off and the part of x's round
// past its last block's start (the shift adds none: s.off is below it).
func (g *geometry) vi(s *shard, v int64) int64 {
	if g.roundShift == 0 {
		return v // one shard, dealt single units: its stream is the bucket's
	}
	x := v + s.off
	return (x>>g.roundShift)<<g.blockShift + max((x&g.roundMask)-g.last, 0)
}

// state returns the shard's balance for the bucket-wide stream value v
// (below zero while reservations wait), the z to swap out, and the clamped z
// to build on: units beyond cap are discarded by moving z up to vi - cap.
func (s *shard) state(v int64, g *geometry) (bal, z, base int64) {
	vi := g.vi(s, v)
	z = s.z.Load()
	base = max(z, vi-s.cap)
	return vi - base, z, base
}

// Bucket is a sharded token bucket. It is safe for concurrent use. The zero
// value is not usable; create one with New. A Bucket must not be copied after
// first use.
//
// Fairness: a blocked AcquireN reserves its tokens when it starts waiting,
// on the next units of the refill stream wherever they are dealt, so that it
// wakes after the deficit divided by the rate (see reserve). The one
// exception is a request within Shards() tokens of the capacity (within a
// quarter of it, if that is less): no shard gives a reservation more than
// its own capacity, so such a request can wake later, by less than that
// many tokens' worth of refill. Waiters are
// admitted in arrival order, and TryAcquire does not overtake them. Cancelling gives back what it took from every shard that
// nobody has taken from since (see admit.Limiter).
type Bucket struct {
	_      noCopy
	shards []shard // power-of-two length; the backing array is line-aligned in practice (power-of-two sizes)
	mask   uint    // len(shards) - 1
	g      geometry

	p   refill.Params // immutable after New
	clk refill.Clock  // immutable after New

	// dry is a stream value before which the shards together hold less
	// than one token: a gather that found them short computed it, and
	// callers whose home shard is short reject on this one read-mostly
	// line instead of reading every shard. It is a lower bound on when a
	// whole token can exist, because the shards' balances grow by at most
	// the stream's growth (the shards' streams sum exactly to V) and takes
	// and reservations only lower them; only a give-back (a put-back after
	// a lost gather, an undone reservation) can raise them sooner, so each
	// give-back stores -gen, a value no stream reaches, and a gather only
	// publishes its bound over the value it read before summing, by CAS.
	_   cpu.CacheLinePad
	dry atomic.Int64

	dryMin int64 // units the stream produces in dryWorth: shorter bounds are not published; immutable

	// debtUntil is the elapsed time until which reservations may hold
	// shards below zero, and gen numbers give-backs. Only blocking calls and
	// give-backs write them, so they sit on their own line, away from the
	// fields every call reads.
	_         cpu.CacheLinePad
	debtUntil atomic.Int64
	gen       atomic.Int64
	resvGen   atomic.Int64 // counts committed reservations; written under resvMu (see putBack)

	// resvMu serialises reservations, their undos and a lost gather's
	// put-back (the blocking path, and TryAcquire only after a lost race).
	// It is a leaf, and the take path never runs with it held: see the
	// package doc's lock order. resvSeq numbers the reservations; an undo
	// gives units back only while its reservation is the newest in the
	// whole bucket (see reservation.undo). Requires resvMu.
	resvMu  sync.Mutex
	resvSeq int64
	_       cpu.CacheLinePad
}

var _ admit.Limiter = (*Bucket)(nil)

// noCopy makes go vet's copylocks check flag copies of a Bucket.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// dryWorth is the shortest dry spell, in nanoseconds, worth publishing a dry
// bound for (see Bucket.dry and gather).
const dryWorth = 1000

// maxShards bounds WithShards; the default is at most the next power of two
// at or above GOMAXPROCS.
const maxShards = 1 << 16

// WithShards sets the number of shards: a power of two, at most the bucket's
// capacity and at most 65536. Without it, New uses the smallest power of two
// at or above GOMAXPROCS, lowered to fit the capacity.
func WithShards(n int) admit.Option {
	return func(c *admit.Config) {
		if n < 1 || n > maxShards || n&(n-1) != 0 {
			c.Fail(fmt.Errorf("%w: WithShards(%d): want a power of two in [1, %d]", admit.ErrInvalidConfig, n, maxShards))
			return
		}
		c.Shards = n
	}
}

// New returns a full bucket holding capacity tokens that refills at
// refillPerSecond tokens per second. It returns an error wrapping
// admit.ErrInvalidConfig for a capacity below 1, a rate that is negative,
// NaN or infinite, one the bucket cannot represent (above 1e9/s, or too
// small for the capacity), or a WithShards count above the capacity; every
// capacity in [1, 1e9] and every rate 0 or in [1e-6, 1e9] is accepted.
func New(capacity int64, refillPerSecond float64, opts ...admit.Option) (*Bucket, error) {
	cfg, err := admit.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	p, err := refill.NewParams(capacity, refillPerSecond)
	if err != nil {
		return nil, err
	}
	n := cfg.Shards
	switch {
	case n == 0:
		n = 1 << bits.Len(uint(runtime.GOMAXPROCS(0)-1))
		for int64(n) > capacity {
			n >>= 1
		}
	case int64(n) > capacity:
		return nil, fmt.Errorf("%w: WithShards(%d) exceeds the capacity %d", admit.ErrInvalidConfig, n, capacity)
	}
	b := &Bucket{
		dryMin: max(1, p.V(dryWorth)),
		shards: make([]shard, n),
		mask:   uint(n - 1),
		p:      p,
		clk:    refill.NewClock(cfg.Clock),
	}
	// Blocks of one token, or of a power of two at most a quarter of the
	// smallest shard's capacity if that is less, and at least a unit.
	shift := uint(bits.TrailingZeros(uint(n)))
	bs := min(p.Shift, uint(max(bits.Len64(uint64(p.Cap>>shift>>2)), 1)-1))
	if n == 1 {
		bs = 0 // blocks make no difference to one shard; see geometry.vi
	}
	b.g = geometry{block: 1 << bs, blockShift: bs, roundShift: bs + shift, roundMask: 1<<(bs+shift) - 1, last: int64(n-1) << bs}
	// Split the capacity exactly: the first cap%n shards get one unit more.
	// Every shard starts full: V_i(0) = 0, so z = -cap_i.
	each, extra := p.Cap/int64(n), p.Cap%int64(n)
	for i := range b.shards {
		s := &b.shards[i]
		s.cap = each
		if int64(i) < extra {
			s.cap++
		}
		s.off = int64(n-1-i) << bs
		s.z.Store(-s.cap)
	}
	return b, nil
}

// Shards returns the number of shards. It is also the most by which the
// bucket may trail mutexbucket when demand reaches every shard.
func (b *Bucket) Shards() int { return len(b.shards) }

// TryAcquire consumes one token if one is available and reports whether it
// did.
func (b *Bucket) TryAcquire() bool { return b.take(b.p.Units(1)) }

// TryAcquireN consumes n tokens if all are available and reports whether it
// did. TryAcquireN(0) is true; n < 0 or n > capacity is false.
func (b *Bucket) TryAcquireN(n int64) bool {
	if n == 0 {
		return true
	}
	return b.p.ValidN(n) && b.take(b.p.Units(n))
}

// Acquire blocks until one token is consumed; see AcquireN.
func (b *Bucket) Acquire(ctx context.Context) error { return b.AcquireN(ctx, 1) }

// AcquireN blocks until n tokens are consumed or ctx ends, as documented on
// admit.Limiter. It sleeps on the bucket's Clock for the computed wait.
func (b *Bucket) AcquireN(ctx context.Context, n int64) error {
	return refill.Acquire(ctx, &b.clk, &b.p, n, b.reserve)
}

// Tokens returns the current balance, summed over the shards. It is
// negative while blocked AcquireN calls hold reservations, and until the
// refill has covered a cancelled reservation that was forfeited (see
// admit.Limiter).
func (b *Bucket) Tokens() float64 {
	now := b.clk.Now()
	v := b.p.V(now)
	// Without reservations, a shard below zero is only a stale reading:
	// it holds nothing.
	debt := now < b.debtUntil.Load()
	var sum int64
	for i := range b.shards {
		bal, _, _ := b.shards[i].state(v, &b.g)
		if !debt {
			bal = max(bal, 0)
		}
		sum += bal
	}
	return b.p.Float(sum)
}

// take consumes need units if they are there and reports whether it did.
func (b *Bucket) take(need int64) bool { return b.takeAt(need, b.p.V(b.clk.Now()), home()) }

// takeAt is take at stream value v, starting from shard start.
func (b *Bucket) takeAt(need, v int64, start uint) bool {
	h := &b.shards[start&b.mask]
	for {
		bal, z, base := h.state(v, &b.g)
		if bal < need {
			break
		}
		if h.z.CompareAndSwap(z, base+need) {
			return true
		}
	}
	if v < b.dry.Load() {
		return false // less than a token in all the shards: see Bucket.dry
	}
	return b.gather(need, v, start)
}

// survey reads every shard at stream value v, loads only: what they hold
// above zero in all, and the largest balance and its shard (-1 if none is
// above zero).
func (b *Bucket) survey(v int64) (sum, most int64, fullest int) {
	fullest = -1
	for i := range b.shards {
		bal, _, _ := b.shards[i].state(v, &b.g)
		sum += max(bal, 0)
		if bal > most {
			most, fullest = bal, i
		}
	}
	return sum, most, fullest
}

// putBack undoes a lost gather's takes: take[j] units from shard start+j,
// whose z it moved from olds[j] to news[j]. It puts units back only into a
// shard nobody has touched since (a put-back after someone else's take
// could resurrect refill that their take's clamp discarded), and only if no
// reservation was committed since the gather read g0, before its first
// take: a reservation planned while these units were out did not count
// them, so putting them back would let a later TryAcquire take them while
// that waiter sleeps. Then they are forfeited. It takes resvMu, so that no
// reservation is planned while it decides; TryAcquire takes it only here,
// after a lost race. So neither putBack nor the take path that calls it
// (takeAt, gather) may run with resvMu held: the mutex is not reentrant,
// so the goroutine would wait on itself, and every later caller that needs
// resvMu would wait behind it (see reserve).
func (b *Bucket) putBack(start uint, take, olds, news []int64, g0 int64) {
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	if b.resvGen.Load() != g0 {
		return
	}
	for j, t := range take {
		if t > 0 {
			b.shards[(start+uint(j))&b.mask].z.CompareAndSwap(news[j], olds[j])
		}
	}
	b.gaveBack()
}

// publishDry publishes the dry bound at stream value v: gather found less
// than one token (one units) in all the shards, with room for a bound worth
// publishing. It sums again after reading the bound and gen, so that a
// give-back after these reads either fails the CAS (it stored -gen) or
// shows in gen after it.
func (b *Bucket) publishDry(v, one int64) {
	dry, gen := b.dry.Load(), b.gen.Load()
	if sum, _, _ := b.survey(v); sum < one && v+one-sum > dry && b.dry.CompareAndSwap(dry, v+one-sum) && b.gen.Load() != gen {
		// A give-back landed after the sum, and another gather had
		// published the very value read above: withdraw (the CAS compares
		// values, so it cannot see that).
		b.gaveBack()
	}
}

// gaveBack invalidates the dry bound after units went back into a shard.
func (b *Bucket) gaveBack() { b.dry.Store(-b.gen.Add(1)) }

// testHookGather, set by tests only, runs in gather between planning the
// takes and making them, with the stream value, the start shard and the
// planned takes (indexed from start): a test takes units there, as a
// concurrent caller would, to make the gather lose its race on demand. It
// costs gather one load of a word that is never written outside tests.
var testHookGather func(b *Bucket, v int64, start uint, take []int64)

// gather is the slow path: the home shard is short. It sums what every
// shard holds with loads only, so a rejection writes nothing.
func (b *Bucket) gather(need, v int64, start uint) bool {
	sum, most, fullest := b.survey(v)
	// One shard holds enough: take from it alone, one line written instead
	// of several. In a dry bucket that is the shard the last whole token
	// was dealt to; in a fuller one the fullest is the one most likely to
	// discard refill at its cap, so this levels too.
	if most >= need {
		s := &b.shards[fullest]
		for {
			bal, z, base := s.state(v, &b.g)
			if bal < need {
				break
			}
			if s.z.CompareAndSwap(z, base+need) {
				return true
			}
		}
	}
	if sum < need {
		// Less than a token: no whole token before the stream has produced
		// the rest. (Between one token and need, the bound would only help
		// requests as large, so none is kept.) A bound that would lift
		// within dryMin is not worth its shared write: at a high rate
		// (case=mixed in bench/, a token every 170 ns) it was rewritten so
		// often that the line bounced between cores and contended calls
		// got 40% slower.
		if one := b.p.Units(1); one-sum >= b.dryMin {
			b.publishDry(v, one)
		}
		return false
	}
	// Near the caps, levelling the takes keeps any shard from sitting full
	// and discarding refill. Below half of them it matters not, and taking
	// from as few shards as possible writes fewer lines and gathers up the
	// fractions a drained bucket leaves behind: levelling them instead left
	// every shard of a nearly dry bucket holding a fraction, so that every
	// later admission wrote all of them (2.7x slower with 8 shards).
	spread := 2*most >= b.shards[fullest].cap
	// Balances, planned takes, and each taken shard's z before and after.
	// They live on the stack for up to 64 shards; more shards cost an
	// allocation on this path.
	var balBuf, takeBuf, oldBuf, newBuf [64]int64
	bal, take := b.scratch(balBuf[:]), b.scratch(takeBuf[:])
	olds, news := b.scratch(oldBuf[:]), b.scratch(newBuf[:])
	sum = b.balances(v, start, bal, false)
	if sum < need {
		return false
	}
	if spread {
		level(bal, take, sum-need, b.soonest(v, start))
	} else {
		fewest(bal, take, need)
	}
	g0 := b.resvGen.Load() // before the first take; see putBack
	if testHookGather != nil {
		testHookGather(b, v, start, take)
	}
	for i, t := range take {
		if t == 0 {
			continue
		}
		s := &b.shards[(start+uint(i))&b.mask]
		for {
			have, z, base := s.state(v, &b.g)
			if have < t {
				// A concurrent caller took these units first.
				b.putBack(start, take[:i], olds, news, g0)
				return false
			}
			if s.z.CompareAndSwap(z, base+t) {
				olds[i], news[i] = z, base+t
				break
			}
		}
	}
	return true
}

// reserve is the blocking step; see refill.Reserve. When the shards hold too
// little, it schedules the request onto the refill stream itself: it finds
// the least stream value w by which the shards, each drained to zero and
// refilled from there, could have produced need units in all (see
// schedule), and moves every shard that contributes to exactly its own
// stream's value at w. The reservation is then an admission at w on every
// shard it touches, like a single bucket's (see internal/refill's
// reservation notes): its units on shard i are the last ones before V_i(w),
// never more than cap_i of them, so each shard's bound holds on its own. A
// shard that would contribute more than its capacity gives only cap_i and
// discards the rest, as a full shard discards its refill.
//
// The plan is committed only as a whole: it swaps each shard's z from the
// value it planned on, and if a concurrent TryAcquire moved one first, the
// shards already swapped are put back and it plans again.
//
// Only planning and committing hold resvMu (see plan). Taking what the
// shards hold is takeAt, as in TryAcquire, and runs without it: a gather
// that loses its race puts its takes back under resvMu. (reserve once
// called takeAt under resvMu when the plan found enough: a lost race there
// waited forever for the mutex its own goroutine held, and so did every
// later reservation and put-back: the whole bucket hung.)
func (b *Bucket) reserve(need, limit int64) (int64, func() bool) {
	now := b.clk.Now()
	start := home()
	if b.takeAt(need, b.p.V(now), start) {
		return 0, nil
	}
	for ; ; now = b.clk.Now() {
		wait, undo, enough, ok := b.plan(need, limit, now)
		if ok {
			return wait, undo
		}
		// The shards held need units at the reading enough (a gather lost
		// a race, or units came back): take them like TryAcquire at that
		// reading, or look again. At one reading takeAt fails where plan
		// found enough only if a concurrent caller moved a shard between.
		if b.takeAt(need, b.p.V(enough), start) {
			return 0, nil
		}
	}
}

// plan is reserve's step under resvMu, which it takes: it schedules need
// units on the stream from the reading now (or a later one, if a commit
// loses a race), commits the reservation, and returns reserve's results
// with ok true. If the shards hold need units at the reading it plans from
// (w == v), it takes nothing and returns that reading as enough, with ok
// false, for reserve to take them outside the lock. It must not be called
// with resvMu held, and it never calls takeAt (see the package doc's lock
// order).
func (b *Bucket) plan(need, limit, now int64) (wait int64, undo func() bool, enough int64, ok bool) {
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	var balBuf, zBuf, toBuf [64]int64
	bal, zs, to := b.scratch(balBuf[:]), b.scratch(zBuf[:]), b.scratch(toBuf[:])
	vmax := b.p.V(refill.Horizon)
	for ; ; now = b.clk.Now() {
		v := b.p.V(now)
		for i := range b.shards {
			bal[i], zs[i], _ = b.shards[i].state(v, &b.g)
		}
		w, can := b.schedule(v, vmax, bal, need)
		if !can {
			return refill.Never, nil, 0, true
		}
		if w == v {
			return 0, nil, now, false
		}
		wake := b.p.When(now, w)
		if wake > refill.Horizon {
			return refill.Never, nil, 0, true
		}
		if wake-now > limit {
			return wake - now, nil, 0, true
		}
		r := &reservation{b: b, wake: wake, old: slices.Clone(zs), z: slices.Clone(zs)}
		for i := range b.shards {
			s := &b.shards[i]
			if wi := b.g.vi(s, w); bal[i]+wi-b.g.vi(s, v) > 0 {
				to[i] = wi
			} else {
				to[i] = zs[i] // deeper in debt than w covers: untouched
			}
		}
		if !r.commit(to) {
			continue
		}
		b.resvGen.Add(1)
		r.prev = b.resvSeq
		b.resvSeq++
		r.seq = b.resvSeq
		for until := b.debtUntil.Load(); until < r.wake && !b.debtUntil.CompareAndSwap(until, r.wake); {
			until = b.debtUntil.Load()
		}
		return r.wake - now, r.undo, 0, true
	}
}

// schedule returns the least stream value w >= v at which the shards, with
// balances bal at v, could have supplied need units, each shard i at most
// min(cap_i, bal[i] + V_i(w) − V_i(v)) of them; false if not even at vmax.
// The supply grows by at most one unit per unit of w (each unit of the
// stream goes to one shard), so at w it is exactly need, unless w == v: then
// the shards already hold need units or more.
func (b *Bucket) schedule(v, vmax int64, bal []int64, need int64) (int64, bool) {
	supply := func(w int64) (sum int64) {
		for i := range b.shards {
			s := &b.shards[i]
			sum += min(s.cap, max(0, bal[i]+b.g.vi(s, w)-b.g.vi(s, v)))
		}
		return sum
	}
	if supply(v) >= need {
		return v, true
	}
	if supply(vmax) < need {
		return 0, false
	}
	lo, hi := v, vmax // supply(lo) < need <= supply(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if supply(mid) >= need {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}

// reservation is what a blocked AcquireN took, for its undo.
type reservation struct {
	b         *Bucket
	old, z    []int64 // each shard's z before and after; equal where untouched
	wake      int64   // elapsed time at which the reservation is admitted
	seq, prev int64   // its number in Bucket.resvSeq, and the one before it
}

// commit swaps every shard from r.old[i] to to[i], all or nothing: if a
// concurrent caller moved a shard first, it swaps back the ones already
// swapped and reports false. It requires b.resvMu held.
func (r *reservation) commit(to []int64) bool {
	b := r.b
	for i := range b.shards {
		if to[i] == r.old[i] {
			continue
		}
		if !b.shards[i].z.CompareAndSwap(r.old[i], to[i]) {
			r.giveBack()
			return false
		}
		r.z[i] = to[i]
	}
	return true
}

// undo gives up the reservation if its wake time has not come, and reports
// whether it did (see refill.Reserve).
//
// The tail rule, bucket-wide. The units go back only if no reservation has
// been made anywhere in the bucket since this one: a later reservation was
// scheduled on the stream after this one's, and giving this one's units
// back would let callers take them again while the later one still wakes
// at its fixed time. Then, per shard, a shard whose z is still the one this
// reservation left behind has had nothing taken since, and swapping z back
// hands the units on exactly; a shard whose z has moved keeps its units
// forfeited. The swap compares against the z it decided on, so a stale
// clock reading, or a pause between the reading and the swap, cannot
// resurrect units a later take consumed. Once every shard is restored, the
// bucket is as it was before this reservation, so the one before it is the
// newest again and may give its units back in turn.
func (r *reservation) undo() bool {
	b := r.b
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	if b.clk.Now() >= r.wake {
		return false
	}
	if b.resvSeq == r.seq {
		if r.giveBack() {
			b.resvSeq = r.prev
		}
	}
	return true // forfeited if a later reservation stands on it
}

// giveBack swaps each shard's z back where nothing was taken since, and
// reports whether every shard was restored. It requires b.resvMu held.
func (r *reservation) giveBack() bool {
	b := r.b
	all := true
	for i := range r.z {
		if r.z[i] != r.old[i] && !b.shards[i].z.CompareAndSwap(r.z[i], r.old[i]) {
			all = false
		}
	}
	b.gaveBack()
	return all
}

// scratch returns buf cut to the shard count, or a new slice if there are
// more than 64 shards.
func (b *Bucket) scratch(buf []int64) []int64 {
	if n := len(b.shards); n <= len(buf) {
		return buf[:n]
	}
	return make([]int64, len(b.shards))
}

// balances fills bal with every shard's balance, indexed from start, and
// returns their sum. Without debt, balances below zero count as zero.
func (b *Bucket) balances(v int64, start uint, bal []int64, debt bool) int64 {
	var sum int64
	for i := range bal {
		bal[i], _, _ = b.shards[(start+uint(i))&b.mask].state(v, &b.g)
		if !debt {
			bal[i] = max(bal[i], 0)
		}
		sum += bal[i]
	}
	return sum
}

// soonest returns a function from rank to position (index from start): the
// rank-th position is the shard that receives the rank-th next unit of the
// refill stream after v: the shard of v's block first, then the shards of
// the blocks after it, in turn, so each rank names exactly one shard.
func (b *Bucket) soonest(v int64, start uint) func(rank int) int {
	return func(rank int) int {
		return int((uint(v>>b.g.blockShift) + uint(rank) - start) & b.mask)
	}
}

// fewest fills take so that taking take[i] from bal[i] takes need units in
// total from as few shards as possible: everything from the fullest, then
// from the next fullest, until the last one chosen gives the rest. It
// requires need <= the sum of the positive balances.
func fewest(bal, take []int64, need int64) {
	for need > 0 {
		j := -1
		for i, b := range bal {
			if take[i] == 0 && b > 0 && (j < 0 || b > bal[j]) {
				j = i
			}
		}
		take[j] = min(bal[j], need)
		need -= take[j]
	}
}

// level fills take so that taking take[i] from bal[i] leaves keep units in
// total, as evenly as possible: every shard keeps min(bal[i], L) or one unit
// less, for the lowest water level L that keeps enough. The shards that keep
// one less are the first in the order at gives, the ones refilled soonest.
// gather uses it with balances and keep at or above zero; it is correct for
// negative ones too. It requires keep <= sum(bal).
func level(bal, take []int64, keep int64, at func(rank int) int) {
	kept := func(l int64) (sum int64) {
		for _, b := range bal {
			sum += min(b, l)
		}
		return sum
	}
	n := int64(len(bal))
	// kept(lo) < keep <= kept(hi): below every balance, kept is n·lo.
	lo := min(slices.Min(bal), keep/n-1) - 1
	hi := slices.Max(bal)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if kept(mid) >= keep {
			hi = mid
		} else {
			lo = mid
		}
	}
	for i, b := range bal {
		take[i] = b - min(b, hi)
	}
	// kept(hi) - kept(hi-1) counts the shards at or above hi, so fewer
	// than that many keep one unit less.
	over := kept(hi) - keep
	for rank := 0; over > 0; rank++ {
		if i := at(rank); bal[i] >= hi {
			take[i]++
			over--
		}
	}
}
