package memstore

import (
	"context"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/nilness"
	"github.com/admit-go/admit/internal/refill"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/internal/memo"
	"github.com/admit-go/admit/rls/internal/tick"
)

// nShards is the number of shards; a power of two.
const nShards = 64

// DefaultMaxKeys is the bucket bound when WithMaxKeys is not given.
const DefaultMaxKeys = 1 << 20

// BucketBytes is what the store's tables cost per bucket of its bound,
// whatever the keys: a slot (a 16-byte digest and the bucket's 48 bytes)
// at the tables' largest load, 4/5. A store of bound maxKeys never holds
// more than maxKeys × BucketBytes + FixedBytes in its tables and shards
// (81 MiB at DefaultMaxKeys), however many keys come and go; see table.
const BucketBytes = 80

// BucketBytes is what the slots cost at the largest load.
var _ = [1]struct{}{}[BucketBytes-slotBytes*loadDen/loadNum]

// FixedBytes bounds what a store costs besides BucketBytes per bucket of
// its bound: its shards, each table's rounding up to a whole slot and its
// smallest size, and the parameters memo (64 KiB), and the allocator's
// rounding of each table's two arrays, less than 8 KiB each (a size class
// below 32 KiB, whole 8 KiB pages above): at a bound of 65,536 the arrays
// of 1,280 slots are rounded up by 204 KiB in all, none at the default.
const FixedBytes = 64<<10 + 2*nShards*8<<10

// maxUnits bounds a bucket's debt (twice its capacity in units), so that
// every sum of two quantities stays within int64.
const maxUnits = 1 << 60

// sweep is how many buckets a new key at a full shard inspects for a full
// one before it evicts.
const sweep = 8

// Option configures a Store.
type Option func(*Store)

// WithClock sets the time source (a buckettest.FakeClock in tests). A nil
// Clock, or one holding a nil pointer or func, is the system clock, as
// without the option (a typed nil panicked here).
func WithClock(c admit.Clock) Option {
	return func(s *Store) {
		if nilness.Is(c) {
			c = nil
		}
		s.clk = refill.NewClock(c)
	}
}

// WithMaxKeys bounds the number of buckets held; n below nShards is raised
// to one per shard. A request's own buckets are never evicted to make room
// for its other descriptors, so below 64 × rls.MaxLimited a store may hold
// up to one request's buckets more than n while that request is decided;
// each shard's next new key brings it back within its share.
func WithMaxKeys(n int) Option { return func(s *Store) { s.maxKeys = n } }

// Store is the in-process rls.Store. It is safe for concurrent use; its zero
// value is not usable (build one with New) and it must not be copied after
// first use.
type Store struct {
	clk       refill.Clock
	seeds     [2]maphash.Seed
	maxKeys   int
	perShard  int
	params    *memo.Memo[limit, tick.Params]
	evictions atomic.Int64
	shards    [nShards]shard
}

// digest names a bucket: two independently seeded 64-bit hashes of its
// key, so that every bucket costs the same bytes however long its key.
// Two keys share a bucket only if both hashes collide: about n²/2^129 for
// n keys if maphash were ideal, with seeds drawn per process that never
// leave it. maphash states no bound, though, and both sums share the
// runtime's per-process hash key, so a collision class that depended on
// that key alone would hit both at once (docs/rls.md, Memory). keyed, a
// library for any caller, pays for a keyed SHA-256 digest instead (about
// 200 ns a key, which would double this store's own cost a descriptor).
type digest [2]uint64

type shard struct {
	mu sync.Mutex
	tb table    // guarded by mu
	_  [48]byte // keeps neighbouring shards' mutexes off one cache line
}

// limit is what a Hit's bucket is computed from.
type limit struct {
	capacity, count int64
	period          time.Duration
}

var _ rls.Store = (*Store)(nil)

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, maxKeys: DefaultMaxKeys}
	s.clk = refill.NewClock(nil)
	for _, o := range opts {
		o(s)
	}
	s.perShard = max(1, s.maxKeys/nShards)
	for i := range s.shards {
		s.shards[i].tb = newTable(slotsFor(s.perShard))
	}
	s.params = memo.New(func(l limit) (tick.Params, error) {
		return tick.New(l.capacity, l.count, l.period, time.Nanosecond, maxUnits)
	})
	return s
}

// Evictions returns how many live buckets were dropped for room.
func (s *Store) Evictions() int64 { return s.evictions.Load() }

// Len returns the number of buckets held (full buckets are not held).
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.tb.n
		sh.mu.Unlock()
	}
	return n
}

func (s *Store) paramsOf(h *rls.Hit) (tick.Params, error) {
	return s.params.Get(limit{h.Capacity, h.Count, h.Period})
}

// Check implements rls.Store.
func (s *Store) Check(h rls.Hit) error {
	if h.Capacity == 0 {
		return nil
	}
	_, err := s.paramsOf(&h)
	return err
}

// cell is one bucket's working state during a Decide: its state after
// carry-over and refill, then with every hit applied (all) and with the
// debt hits' charges only (debt), which is what a refused request leaves.
type cell struct {
	dig      digest
	sh       *shard
	p        tick.Params
	all, dbt int64
	t        int64
	// fullAll and fullDbt: all and dbt are 0 because the bucket is full,
	// not because a carry clamped it to a smaller burst. A full bucket is
	// dropped, which reads as full under any limit, and a full one carries
	// over as full: a balance clamped to a smaller burst must do neither,
	// or one key under two limits refills (10 with 5 left, carried into 5,
	// is full; carried back, or dropped and read under 10, it had 10): it
	// is stored with debt -1, full under its parameters and its balance
	// under others.
	fullAll, fullDbt bool
}

// Decide implements rls.Store; see the package doc for how it is atomic.
// Errors: a hit whose limit cannot be represented wraps
// admit.ErrInvalidConfig, and nothing is taken.
func (s *Store) Decide(ctx context.Context, hits []rls.Hit, results []rls.Result) (bool, error) {
	// Parameters and digests first, outside the locks.
	var pbuf [8]tick.Params
	var dbuf [8]digest
	ps, digs := pbuf[:0], dbuf[:0]
	var obuf [8]uint8
	order := obuf[:0]
	for i := range hits {
		h := &hits[i]
		var p tick.Params
		if h.Capacity != 0 {
			var err error
			if p, err = s.paramsOf(h); err != nil {
				return false, err
			}
		}
		ps = append(ps, p)
		dg := digest{maphash.String(s.seeds[0], h.Key), maphash.String(s.seeds[1], h.Key)}
		if dg == (digest{}) {
			dg[1] = 1 // the zero digest marks an empty slot
		}
		digs = append(digs, dg)
		if h.Capacity != 0 {
			order = insertUnique(order, uint8(dg[0]&(nShards-1)))
		}
	}
	// Lock order: ascending shard index, released in reverse.
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for j := len(order) - 1; j >= 0; j-- {
			s.shards[order[j]].mu.Unlock()
		}
	}()
	now := s.clk.Now()

	var cbuf [8]cell
	var ibuf [8]int
	cells, at := cbuf[:0], ibuf[:0]
	// after[i] is hit i's bucket right after it: each hit reports its own
	// state, so two hits of one key report the first's take, then both.
	var abuf [8]state
	after := abuf[:0]
	var index map[digest]int // built when a request has many buckets
	admitted := true
	for i := range hits {
		h := &hits[i]
		if h.Capacity == 0 { // a limit of zero: holds nothing but a check
			results[i].OK = h.N == 0
			admitted = admitted && (results[i].OK || h.Shadow)
			at = append(at, -1)
			after = append(after, state{})
			continue
		}
		j := find(cells, index, digs[i])
		if j < 0 {
			j = len(cells)
			cells = append(cells, s.load(digs[i], ps[i], now))
			if len(cells) > 16 {
				if index == nil {
					index = make(map[digest]int, 2*len(cells))
					for k := range cells {
						index[cells[k].dig] = k
					}
				}
				index[digs[i]] = j
			}
		} else if cells[j].p != ps[i] {
			cells[j].carry(ps[i], now) // one key under two limits in one request
		}
		at = append(at, j)
		c := &cells[j]
		held := c.p.Holds(c.all, h.N)
		switch {
		case h.Debt && h.N >= 0:
			c.all, c.dbt = c.p.Charge(c.all, h.N), c.p.Charge(c.dbt, h.N)
		case held:
			c.all = c.p.Take(c.all, h.N)
		}
		c.fullAll, c.fullDbt = c.fullAll && c.all == 0, c.fullDbt && c.dbt == 0
		results[i].OK = held
		admitted = admitted && (held || h.Shadow)
		after = append(after, state{all: c.all, dbt: c.dbt, t: c.t})
	}
	for j := range cells {
		c := &cells[j]
		d := c.dbt
		if admitted {
			d = c.all
		}
		full := c.fullDbt
		if admitted {
			full = c.fullAll
		}
		if d == 0 && !full {
			// Full only by a carry's clamp: dropped, it would read as
			// full under a larger burst. Stored as -1: full under this
			// limit, its balance (this burst) under another.
			d = -1
		}
		s.store(c, d, cells, index, now)
	}
	for i := range hits {
		if at[i] < 0 {
			results[i].Remaining, results[i].ResetAfter = 0, 0
			continue
		}
		// The cell's parameters at hit i were the hit's own: a hit under
		// other ones carries the cell over to them.
		a := &after[i]
		d := a.dbt
		if admitted {
			d = a.all
		}
		results[i].Remaining = ps[i].Remaining(d)
		results[i].ResetAfter = resetAfter(&ps[i], d, a.t, now)
	}
	return admitted, nil
}

// state is a bucket's debts (with every take, and with the debt charges
// only) and tick, right after one hit of a Decide.
type state struct{ all, dbt, t int64 }

// load returns the working state of the bucket dg under p at elapsed time
// now: the stored one refilled (carried over first if its limit changed),
// or a full one.
func (s *Store) load(dg digest, p tick.Params, now int64) cell {
	sh := &s.shards[dg[0]&(nShards-1)]
	c := cell{dig: dg, sh: sh, p: p, t: now / p.Q}
	full := true // absent, or refilled to full (not by a clamp)
	if i := sh.tb.find(dg); i >= 0 {
		b := &sh.tb.vals[i]
		clamped := b.d < 0
		bd := max(b.d, 0)
		if b.p != p {
			d, _ := b.p.Refill(bd, b.t, now/b.p.Q)
			c.all, full = carryDebt(&p, &b.p, d, !clamped), d == 0 && !clamped
		} else {
			c.all, c.t = p.Refill(bd, b.t, now/p.Q)
			full = c.all == 0 && !clamped
		}
	}
	c.dbt, c.fullAll, c.fullDbt = c.all, full, full
	return c
}

// carry moves a cell to new parameters at elapsed time now, within a
// request: a full bucket stays full, and one at 0 only by a carry's clamp
// carries its balance.
func (c *cell) carry(p tick.Params, now int64) {
	c.all, c.dbt = carryDebt(&p, &c.p, c.all, c.fullAll), carryDebt(&p, &c.p, c.dbt, c.fullDbt)
	c.fullAll, c.fullDbt = c.fullAll && c.all == 0, c.fullDbt && c.dbt == 0
	c.p, c.t = p, now/p.Q
}

// carryDebt carries debt d of old into p: Carry if the bucket is full or
// in debt, its balance if d is 0 by a clamp.
func carryDebt(p, old *tick.Params, d int64, full bool) int64 {
	if full {
		return p.Carry(old, d)
	}
	return p.CarryBalance(old, d)
}

// store writes a cell's final debt d back: a full bucket is the same as
// none and is dropped. Called with the cell's shard locked. The cell's slot
// is found again: writing an earlier cell may have moved it.
func (s *Store) store(c *cell, d int64, cells []cell, index map[digest]int, now int64) {
	tb := &c.sh.tb
	i := tb.find(c.dig)
	switch {
	case d == 0:
		if i >= 0 {
			tb.remove(i)
		}
	case i >= 0:
		tb.vals[i] = bucket{p: c.p, d: d, t: c.t}
	default:
		s.room(tb, cells, index, now)
		tb.insert(c.dig, bucket{p: c.p, d: d, t: c.t})
	}
}

// room makes space in a shard's table for one more bucket when it holds
// its share, repeating roomOnce until it holds less or nothing more can
// go: a shard whose share is smaller than a request's buckets in it holds
// more while that request is decided (its own buckets are never evicted
// for its other descriptors), and comes back under its share at its next
// new key. Called with the shard locked.
func (s *Store) room(tb *table, cells []cell, index map[digest]int, now int64) {
	for tb.n >= s.perShard && s.roomOnce(tb, cells, index, now) {
	}
}

// roomOnce, from where the last scan stopped, inspects at least sweep
// buckets that none of this request's cells is, drops those that are full
// again (the same as absent, so nothing is lost, but for a bucket marked
// full only by a clamp, which then reads full under a larger limit: the
// documented bound), and if none was, evicts the fullest one it inspected (the one whose loss forgives least; counted
// by Evictions). It inspects more than sweep only while every one seen so
// far belongs to the request. It reports whether it removed a bucket.
// Called with the shard locked.
func (s *Store) roomOnce(tb *table, cells []cell, index map[digest]int, now int64) bool {
	var full [sweep]digest
	nfull, seen := 0, 0
	var victim digest
	var vd, vcap uint64 // the victim's debt and capacity, in its units
	found := false
	i := tb.hand
	for range len(tb.keys) {
		k, b := tb.keys[i], &tb.vals[i]
		i = tb.next(i)
		if k == (digest{}) || find(cells, index, k) >= 0 {
			continue // empty, or this request writes it
		}
		seen++
		d, _ := b.p.Refill(max(b.d, 0), b.t, now/b.p.Q)
		switch {
		case d == 0:
			full[nfull] = k
			nfull++
		case !found || fuller(uint64(d), uint64(b.p.CapU), vd, vcap):
			victim, vd, vcap, found = k, uint64(d), uint64(b.p.CapU), true
		}
		if nfull == sweep || seen >= sweep && (found || nfull > 0) {
			break
		}
	}
	tb.hand = i
	for _, k := range full[:nfull] {
		tb.remove(tb.find(k))
	}
	if nfull == 0 && found {
		tb.remove(tb.find(victim))
		s.evictions.Add(1)
	}
	return nfull > 0 || found
}

// fuller reports whether debt d1 of capacity c1 is a smaller part of its
// bucket than d2 of c2: d1/c1 < d2/c2, compared exactly.
func fuller(d1, c1, d2, c2 uint64) bool {
	h1, l1 := bits.Mul64(d1, c2)
	h2, l2 := bits.Mul64(d2, c1)
	return h1 < h2 || h1 == h2 && l1 < l2
}

// resetAfter is the time from elapsed time now until a bucket of debt d as
// of tick t is full again: Never if it never will be.
func resetAfter(p *tick.Params, d, t, now int64) time.Duration {
	full, ok := p.Full(d)
	if !ok {
		return rls.Never
	}
	if d == 0 {
		return 0
	}
	if full > (math.MaxInt64/p.Q)-t {
		return rls.Never
	}
	return time.Duration((t+full)*p.Q - now)
}

// find returns the index of the cell of dg, or -1; index, when not nil,
// holds every cell.
func find(cells []cell, index map[digest]int, dg digest) int {
	if index != nil {
		if j, ok := index[dg]; ok {
			return j
		}
		return -1
	}
	for j := range cells {
		if cells[j].dig == dg {
			return j
		}
	}
	return -1
}

// insertUnique inserts v into the ascending s unless present.
func insertUnique(s []uint8, v uint8) []uint8 {
	i := 0
	for i < len(s) && s[i] < v {
		i++
	}
	if i < len(s) && s[i] == v {
		return s
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}
