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
// A collapse (the bucket running dry, or AcquireN having to wait) sums the
// shards at a reading it takes after freezing them all, so on a clock that
// keeps admit.Clock's promise of monotonic readings every take applied
// before it came at an earlier reading. A clock that steps back breaks
// that (a test's fake clock set earlier than a reading a take applied):
// the collapse then counts again, for each shard that was full at the
// later reading, the refill between the two, which its cap had thrown
// away. A review (2026-12-07) made a bucket of capacity 100 and rate 1/s
// admit 150 at one instant so: 50 taken at 1000 s, then AcquireN(100) at a
// reading of 900 s. mutexbucket, casbucket and gcra keep the bound on such
// a clock. Keeping it here would take a latest-reading word per shard,
// raised by a second CompareAndSwap on every admission; the real clock
// never needs it.
//
// A caller starts at its home shard, picked from the processor (P) it runs
// on, so that goroutines on different cores touch different cache lines and
// an admission writes no shared word other than its own shard's. If the home
// shard is short, the caller first sums every shard with loads only; if the
// sum is short too it rejects, having written nothing to any shard.
// Otherwise, if one shard holds enough, it takes from that one, the
// fullest, alone; only when none does it gathers the units from several
// shards, fractions included, and if a concurrent caller won the race for
// them it rejects, putting back what it took into every shard nobody else
// has touched since (a put-back after another take could resurrect refill
// the cap had discarded, so it is dropped instead), unless the bucket
// changed representation meanwhile.
//
// Dry. A bucket that holds less than a token has nothing to shard. The
// first gather to find the shards that short collapses the bucket into one
// central word, a single bucket of the whole capacity and rate in GCRA's
// one-word form, and freezes the shards; a central admission that leaves
// enough tokens (16 a shard, at most half the capacity) deals them back to
// the shards. While the bucket is dry a call loads its home shard, which
// while it is frozen only its own processor's calls write (standing aside's
// records, below), and the central word, and writes the central word only
// to admit: one shared line, as gcra, where the shards' dry path read every
// shard and took each new token from whichever shard the refill had dealt
// it to, moving every shard's line between the cores. Both steps are exact (the balance is carried over
// to the unit) and happen under resvMu; central.go has the proof that the
// bound holds across them. A blocked AcquireN reserves on the central word
// (collapsing the bucket first), so waiters wake exactly when one bucket's
// would.
//
// Standing aside. Cores that call a dry bucket flat out would race for
// every token as it appears, and each race moves the central word's line
// between them twice. A core that loses the central word to another and
// finds less than a token left instead stands aside: for a microsecond of
// refill (at most 8 tokens, and less than the capacity) its dry calls are
// refused without reading the central word, and the winner admits a run of
// tokens with the line in its own cache, as the holder of a lock would;
// after a run of 16 tokens the winner gives a core that stands aside its
// turn. Those refusals are not exact (the tokens are there for other cores,
// and for this one when the stand ends), but they admit nothing and discard
// no refill (unless a cancelled reservation gives tokens back meanwhile), a
// caller alone on the bucket since it last ran dry never stands aside, and
// AcquireN still decides on the central word. The price is fairness between
// cores over microseconds: the tokens go to one core in runs. Under
// admit_purego, whose homes are not processors, nobody stands aside.
// central.go has the rules, their proof and what a caller left alone after
// contention may see.
//
// Lock order. One mutex, resvMu, serialises the steps between the two
// representations, reservations (AcquireN when it must wait), their undos
// and a lost gather's put-back. It is a leaf. An admission never waits for
// it, except to put back after a gather lost its race: a collapse or a
// spread that finds it held is left to a later call (TryLock). While it is
// held the bucket only loads, stores and swaps its words, computes,
// allocates a reservation's undo and reads the Clock's Now (a Clock must
// not call back into the bucket); it never sleeps, never takes another lock
// of its own, and never runs the take path (takeAt, gather), since a gather
// that loses its race locks resvMu to put back. So AcquireN tries to take
// before it locks.
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
// proceed in parallel instead of bouncing one cache line between cores.
// When demand outruns the rate it behaves like gcra, one word written only
// to admit: its dry path is 176 instructions a call with 2 shards or 8
// (callgrind, bench/cmd/dryloop; gcra 107, mutexbucket 133; the shards'
// dry path it replaced took 207–709 with 2 shards and about 1060 with 8).
// With cores standing aside, bench/'s mixed case (a token every 167 ns, two
// goroutines calling flat out) took 22.2 ns a call on two cores of a quiet
// 2-vCPU machine, against 85 without standing aside, 48.1 for mutexbucket
// and 115 for gcra's one word (docs/benchmarks.md). Its costs are memory (a cache line per shard), one
// goroutine alone on a bucket of many shards while it is not dry (most of
// its admissions come from other shards), a step between the two forms
// when demand crosses the rate, fairness between cores over microseconds
// while the bucket is dry, and the burst caveat above.
package shardedbucket

import (
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/cpu"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
)

// Bucket is a sharded token bucket. It is safe for concurrent use. The zero
// value is not usable; create one with New. A Bucket must not be copied after
// first use.
//
// Fairness: a blocked AcquireN reserves its tokens when it starts waiting,
// on the central word (see reserve), so that it wakes after the deficit
// divided by the rate, exactly as one bucket's would. Waiters are admitted
// in arrival order, and TryAcquire does not overtake them. Cancelling gives
// the tokens back by the tail rule (see admit.Limiter).
type Bucket struct {
	_      noCopy
	shards []shard // power-of-two length; the backing array is line-aligned in practice (power-of-two sizes)
	mask   uint    // len(shards) - 1
	g      geometry

	p          refill.Params // immutable after New
	clk        refill.Clock  // immutable after New
	spreadAt   int64         // the central balance at which the bucket spreads again; immutable
	asideUnits int64         // how long a home stands aside, in stream units (central.go); immutable
	asideRun   int64         // units a home's run takes before it gives a turn (central.go); immutable but in tests

	// c is the central word (central.go): spread while the shards hold
	// the state, or, while the bucket is dry, the empty point on the
	// stream V of the whole bucket, every shard then frozen. Calls whose
	// home shard is short read it; only central admissions, reservations
	// and the steps between the two representations write it. It sits on
	// its own line, so that its writes leave the fields every call reads
	// in every core's cache.
	_ cpu.CacheLinePad
	c atomic.Int64

	// debtUntil is the latest wake of any reservation: before it, a
	// central balance below zero may be a reservation's debt rather than a
	// stale reading, and Tokens reports it. epoch counts the steps between
	// the representations (collapse, spread). Only blocking calls and
	// those steps write them, so they share c's line.
	debtUntil atomic.Int64
	epoch     atomic.Int64

	// resvMu serialises the steps between the representations,
	// reservations, their undos and a lost gather's put-back. It is a
	// leaf, and the take path never waits for it except in a put-back,
	// after a lost race: a collapse or a spread that finds it held is
	// left to a later call (TryLock). See the package doc's lock order.
	_      cpu.CacheLinePad
	resvMu sync.Mutex
	_      cpu.CacheLinePad
}

var _ admit.Limiter = (*Bucket)(nil)

// noCopy makes go vet's copylocks check flag copies of a Bucket.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

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
		spreadAt:   spreadThreshold(p.Cap, p.Units(1), n),
		asideUnits: asideSpan(&p),
		asideRun:   p.Units(asideRun),
		shards:     make([]shard, n),
		mask:       uint(n - 1),
		p:          p,
		clk:        refill.NewClock(cfg.Clock),
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
	b.c.Store(spread)
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

// Tokens returns the current balance: the central word's while the bucket
// is dry, otherwise the sum over the shards. It is negative while blocked
// AcquireN calls hold reservations, and until the refill has covered a
// cancelled reservation that was forfeited (see admit.Limiter). Read
// during a step between the representations it may miss what a frozen
// shard is about to be dealt.
func (b *Bucket) Tokens() float64 {
	now := b.clk.Now()
	v := b.p.V(now)
	if c := b.c.Load(); c != spread {
		bal := min(b.p.Cap, v-c)
		if now >= b.debtUntil.Load() {
			bal = max(bal, 0) // no reservation is waiting: below zero is only a stale reading
		}
		return b.p.Float(bal)
	}
	// Shards hold no reservations: a shard below zero is only a stale
	// reading or frozen, and holds nothing.
	sum, _, _ := b.survey(v)
	return b.p.Float(sum)
}
