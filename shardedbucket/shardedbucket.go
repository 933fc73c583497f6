// Package shardedbucket implements a token bucket split into cache-line
// padded shards, each a single atomic word, with an exact global bound.
//
// Capacity and rate are divided among a power-of-two number of shards in
// integer units of 2^-k tokens, so that the parts add up exactly to the whole
// (100 tokens over 8 shards is 12.5 tokens each, exactly). The rate is split
// without remainder too: shard i receives every unit of the bucket's refill
// stream V whose index is i modulo the shard count, so the shards together
// refill exactly as fast as one bucket would.
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
// short rejects after reading that one word instead of every shard. Otherwise it gathers
// the units from several shards, fractions included, and if a concurrent
// caller won the race for them it rejects, putting back what it took into
// every shard nobody else has touched since (a put-back after another take
// could resurrect refill the cap had discarded, so it is dropped instead).
//
// The bound: never more than capacity + rate × elapsed (+1 unit for
// rounding), under any concurrency. A shard that is full while its siblings
// are not discards its share of the refill, which one bucket would have
// kept. When demand reaches every shard, as when the bucket is kept drained
// (a caller asking at every whole token), this costs less than a token per
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
// a dry bucket rejects on one read-mostly word. Its costs are memory (a
// cache line per shard), gathers that read and write several shards when
// the bucket hovers around a token (1.2× mutexbucket's cost there, on two
// cores), and the burst caveat above. See the README for measured numbers.
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
	off int64        // shards-1-i, so that V_i(t) = (V(t) + off) >> shift; immutable
	_   [unsafe.Sizeof(cpu.CacheLinePad{}) - 24]byte
}

// state returns the shard's balance for the bucket-wide stream value v
// (below zero while reservations wait), the z to swap out, and the clamped z
// to build on: units beyond cap are discarded by moving z up to vi - cap.
func (s *shard) state(v int64, shift uint) (bal, z, base int64) {
	vi := (v + s.off) >> shift
	z = s.z.Load()
	base = max(z, vi-s.cap)
	return vi - base, z, base
}

// ready is the bucket-wide stream value at which a shard whose z is z is
// back at zero, or vmax+1 if that lies beyond vmax, the stream's value at the
// horizon (the check comes first, so the shift cannot overflow).
func (s *shard) ready(z int64, shift uint, vmax int64) int64 {
	if z > (vmax+s.off)>>shift {
		return vmax + 1
	}
	return z<<shift - s.off
}

// Bucket is a sharded token bucket. It is safe for concurrent use. The zero
// value is not usable; create one with New. A Bucket must not be copied after
// first use.
//
// Fairness: a blocked AcquireN reserves its tokens when it starts waiting,
// spreading the debt over the shards so that they all come back above zero
// after the deficit divided by the rate, and sleeps until then. Waiters are
// admitted in arrival order, exactly at the rate, and TryAcquire does not
// overtake them. Cancelling gives back what it took from every shard that
// nobody has taken from since (see admit.Limiter).
type Bucket struct {
	_      noCopy
	shards []shard // power-of-two length; the backing array is line-aligned in practice (power-of-two sizes)
	mask   uint    // len(shards) - 1
	shift  uint    // log2(len(shards))

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

	// resvMu serialises reservations and their undos (the blocking path
	// only: TryAcquire never takes it). resvSeq numbers the reservations;
	// an undo gives units back only while its reservation is the newest in
	// the whole bucket (see reservation.undo). Requires resvMu.
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
		shift:  uint(bits.TrailingZeros(uint(n))),
		p:      p,
		clk:    refill.NewClock(cfg.Clock),
	}
	// Split the capacity exactly: the first cap%n shards get one unit more.
	// Every shard starts full: V_i(0) = 0, so z = -cap_i.
	each, extra := p.Cap/int64(n), p.Cap%int64(n)
	for i := range b.shards {
		s := &b.shards[i]
		s.cap = each
		if int64(i) < extra {
			s.cap++
		}
		s.off = int64(n - 1 - i)
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
		bal, _, _ := b.shards[i].state(v, b.shift)
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
		bal, z, base := h.state(v, b.shift)
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

// gaveBack invalidates the dry bound after units went back into a shard.
func (b *Bucket) gaveBack() { b.dry.Store(-b.gen.Add(1)) }

// gather is the slow path: the home shard is short. It sums what every
// shard holds with loads only, so a rejection writes nothing.
func (b *Bucket) gather(need, v int64, start uint) bool {
	// Before the sum: a give-back after these reads either fails the CAS
	// below (it stored -gen) or shows in gen after it.
	dry, gen := b.dry.Load(), b.gen.Load()
	var sum int64
	for i := range b.shards {
		bal, _, _ := b.shards[i].state(v, b.shift)
		sum += max(bal, 0)
	}
	if sum < need {
		// Less than a token: no whole token before the stream has produced
		// the rest. (Between one token and need, the bound would only help
		// requests as large, so none is kept.) A bound that would lift
		// within dryMin is not worth its shared write: at a high rate
		// (case=mixed in bench/, a token every 170 ns) it was rewritten so
		// often that the line bounced between cores and contended calls
		// got 40% slower.
		if one := b.p.Units(1); one-sum >= b.dryMin && v+one-sum > dry &&
			b.dry.CompareAndSwap(dry, v+one-sum) && b.gen.Load() != gen {
			// A give-back landed after the sum, and another gather had
			// published the very value read above: withdraw (the CAS
			// compares values, so it cannot see that).
			b.gaveBack()
		}
		return false
	}
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
	level(bal, take, sum-need, b.soonest(v, start))
	for i, t := range take {
		if t == 0 {
			continue
		}
		s := &b.shards[(start+uint(i))&b.mask]
		for {
			have, z, base := s.state(v, b.shift)
			if have < t {
				// A concurrent caller took these units first. Put back what
				// this call took, but only into a shard nobody has touched
				// since: a put-back after someone else's take could
				// resurrect refill that their take's clamp discarded.
				for j := range i {
					if take[j] > 0 {
						b.shards[(start+uint(j))&b.mask].z.CompareAndSwap(news[j], olds[j])
					}
				}
				b.gaveBack()
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
// little, it spreads the debt over all of them as evenly as it spreads
// takes, so that they all come back above zero together, after the deficit
// divided by the rate.
func (b *Bucket) reserve(need, limit int64) (int64, func() bool) {
	now := b.clk.Now()
	v := b.p.V(now)
	start := home()
	if b.takeAt(need, v, start) {
		return 0, nil
	}
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	var balBuf, takeBuf [64]int64
	bal, take := b.scratch(balBuf[:]), b.scratch(takeBuf[:])
	sum := b.balances(v, start, bal, true)
	if _, ok := refill.Deficit(sum, need); !ok {
		return refill.Never, nil
	}
	level(bal, take, sum-need, b.soonest(v, start))
	// The planned wake: each shard left below zero must refill to zero.
	// Its z after the take is vi - bal + take.
	vmax := b.p.V(refill.Horizon)
	ready := int64(0)
	for i, t := range take {
		if t > 0 && bal[i] < t {
			s := &b.shards[(start+uint(i))&b.mask]
			ready = max(ready, s.ready((v+s.off)>>b.shift-bal[i]+t, b.shift, vmax))
		}
	}
	wake := b.p.When(now, ready)
	if wake > refill.Horizon {
		return refill.Never, nil
	}
	if wake > now && wake-now > limit {
		return wake - now, nil
	}
	// Take, below zero where planned. Concurrent callers may have moved the
	// shards since the plan, so the wake is computed again from the z each
	// take left behind.
	r := &reservation{b: b, start: start, take: slices.Clone(take), z: make([]int64, len(take))}
	ready = 0
	for i, t := range r.take {
		if t == 0 {
			continue
		}
		s := &b.shards[(start+uint(i))&b.mask]
		for {
			_, z, base := s.state(v, b.shift)
			if s.z.CompareAndSwap(z, base+t) {
				r.z[i] = base + t
				ready = max(ready, s.ready(base+t, b.shift, vmax))
				break
			}
		}
	}
	r.wake = b.p.When(now, ready)
	r.prev = b.resvSeq
	b.resvSeq++
	r.seq = b.resvSeq
	if r.wake > refill.Horizon || r.wake > now && r.wake-now > limit {
		r.giveBack() // the newest, and its caller is not admitted, due or not
		if r.wake > refill.Horizon {
			return refill.Never, nil
		}
		return r.wake - now, nil
	}
	for until := b.debtUntil.Load(); until < r.wake && !b.debtUntil.CompareAndSwap(until, r.wake); {
		until = b.debtUntil.Load()
	}
	if r.wake == now {
		return 0, nil
	}
	return r.wake - now, r.undo
}

// reservation is what a blocked AcquireN took, for its undo.
type reservation struct {
	b         *Bucket
	start     uint
	take      []int64 // units taken from shard start+i
	z         []int64 // the z each take left behind
	wake      int64   // elapsed time at which every take is covered
	seq, prev int64   // its number in Bucket.resvSeq, and the one before it
}

// undo gives up the reservation if its wake time has not come, and reports
// whether it did (see refill.Reserve).
//
// The tail rule, bucket-wide. The units go back only if no reservation has
// been made anywhere in the bucket since this one. Per shard it would not be
// enough: a later reservation levels its takes against every shard's debt,
// this one's included, and may take from one shard far more than that
// shard's capacity because another shard is deep in debt; giving back that
// debt afterwards leaves the later reservation holding units that a single
// bucket would have discarded, and it wakes into a refilled shard (an
// independent review built 20 tokens at one instant from capacity 16 this
// way at 1e9/s). Then, per shard, a shard whose z is still the one this
// reservation left behind has had nothing taken since, and swapping z back
// hands the units on exactly (shards left at zero included); a shard whose z
// has moved keeps its units forfeited. The swap compares against the z it
// decided on, so a stale clock reading, or a pause between the reading and
// the swap, cannot resurrect units a later take consumed. Once every shard
// is restored, the bucket is as it was before this reservation, so the one
// before it is the newest again and may give its units back in turn.
func (r *reservation) undo() bool {
	b := r.b
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	if b.clk.Now() >= r.wake {
		return false
	}
	if b.resvSeq == r.seq {
		r.giveBack()
	}
	return true // forfeited if a later reservation stands on it
}

// giveBack swaps each shard's z back where nothing was taken since, and makes
// the previous reservation the newest if every shard was restored. It
// requires b.resvMu held and r to be the newest reservation.
func (r *reservation) giveBack() {
	b := r.b
	all := true
	for i, t := range r.take {
		if t > 0 && !b.shards[(r.start+uint(i))&b.mask].z.CompareAndSwap(r.z[i], r.z[i]-t) {
			all = false
		}
	}
	if all {
		b.resvSeq = r.prev
	}
	b.gaveBack()
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
		bal[i], _, _ = b.shards[(start+uint(i))&b.mask].state(v, b.shift)
		if !debt {
			bal[i] = max(bal[i], 0)
		}
		sum += bal[i]
	}
	return sum
}

// soonest returns a function from rank to position (index from start): the
// rank-th position is the shard that receives the rank-th next unit of the
// refill stream after v. Shard i receives unit u when (u + off_i) is a
// multiple of the shard count, so each rank names exactly one shard.
func (b *Bucket) soonest(v int64, start uint) func(rank int) int {
	return func(rank int) int {
		off := (int64(len(b.shards)) - int64(rank) - 1 - v) & int64(b.mask)
		return int((b.mask - uint(off) - start) & b.mask)
	}
}

// level fills take so that taking take[i] from bal[i] leaves keep units in
// total, as evenly as possible: every shard keeps min(bal[i], L) or one unit
// less, for the lowest water level L that keeps enough. The shards that keep
// one less are the first in the order at gives, the ones refilled soonest, so
// that a reservation spread this way is covered as soon as the stream has
// produced its deficit. Balances and keep may be negative (reservations).
// It requires keep <= sum(bal).
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
