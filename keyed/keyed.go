// Package keyed implements per-key token buckets in one process: a separate
// bucket for every client (API key, user, IP address), with memory bounded
// under a key-spraying attack and no background goroutine.
//
// # Buckets
//
// Every key behaves exactly like a mutexbucket.New(capacity, rate) created
// together with the Limiter and left untouched until the key is first seen:
// it starts full, refills lazily with the same integer arithmetic (package
// internal/refill: units of 2^-k tokens, refill V(b) − V(a) on the
// limiter's stream, no drift), and never admits more than
// capacity + rate × T (+1 for rounding) over any span T, under any number of
// goroutines.
//
// A key holds one int64, z: the point on the refill stream at which its
// bucket would be empty. At elapsed time t its balance is
// min(capacity, V(t) − z); admitting u units moves z to
// max(z, V(t) − capacity) + u. A bucket is full exactly when
// z <= V(t) − capacity, and a full bucket is indistinguishable from one
// never used, so forgetting a full key is exact: its next request finds a
// full bucket either way.
//
// # Time
//
// Keys live in power-of-two many shards, picked by a hash of the key, each a
// mutex around a map and the latest clock reading the shard has applied. A
// call uses the later of its own reading and that one, so within a shard,
// and so for every key, time never moves back: a stale reading is treated as
// the latest applied, adds nothing, and is stored as nothing new (the rule
// of mutexbucket, kept per shard rather than per key, so a key costs one
// word). RetryAfter and ResetAfter are counted from that time, exactly to
// the nanosecond at which the bucket will hold what is asked.
//
// # Memory
//
// The limiter holds at most WithMaxKeys keys (default DefaultMaxKeys),
// split evenly over the shards. Each shard keeps its keys in least recently
// used order, and every call drops up to two full buckets from the least
// recently used end (a bucket last touched more than capacity/rate ago is
// always full), so full keys go without a goroutine or a pass over the map,
// in amortised O(1): each key is dropped at most once per insertion. A key
// whose bucket is full after a call (a peek at a full bucket) is dropped at
// once.
//
// When a new key arrives at a shard whose share of the bound is taken and
// whose least recently used bucket is live (not full), the limiter answers
// at once, by the policy chosen with WithPolicy:
//
//   - EvictLRU (the default) forgets the least recently used key. Its client
//     then sees a fresh, full bucket: up to one extra burst of capacity for
//     that client, once per eviction, and nothing more. Stats.Evictions
//     counts them; with the bound above the number of clients active within
//     one refill period (capacity/rate), there are none.
//   - RefuseNew keeps every live bucket and refuses the new key: Allowed is
//     false and the error wraps admit.ErrUnavailable, with RetryAfter until
//     the least recently used bucket of its shard is full and can be
//     dropped. No client ever exceeds its bound, but under a key-spraying
//     attack new legitimate clients are refused until the attack's buckets
//     refill. Stats.Refusals counts them.
//
// The bound is split over the shards, so a shard can reach its share while
// the limiter as a whole holds fewer keys: with a uniform hash the shards
// fill evenly, and eviction or refusal starts when the limiter holds a few
// per cent fewer keys than the bound. Memory is held at the peak: a shard's
// map and slot array do not shrink when keys are dropped. See the README for
// measured bytes per key.
//
// Pick keyed for per-client limits in one process; pick the redisbucket
// module when several processes must share the limits.
package keyed

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
)

// Limiter is a set of token buckets, one per key. It is safe for concurrent
// use. The zero value is not usable; create one with New. A Limiter must
// not be copied after first use.
type Limiter struct {
	_        noCopy
	shards   []shard
	mask     uint64 // len(shards) - 1
	seed     maphash.Seed
	p        refill.Params // immutable after New
	clk      refill.Clock  // immutable after New
	capacity int64         // in tokens
	maxKeys  int
	refuse   bool
	errFull  error // returned on every refusal; built once so that refusals do not allocate
}

var _ admit.KeyedLimiter = (*Limiter)(nil)

// noCopy makes go vet's copylocks check flag copies of a Limiter.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// never is the RetryAfter or ResetAfter of a bucket that will never hold
// what is asked: a zero rate, or a wait past the clock's horizon.
const never = time.Duration(math.MaxInt64)

// New returns a limiter whose every key holds a bucket of capacity tokens
// refilling at refillPerSecond tokens per second. It returns an error
// wrapping admit.ErrInvalidConfig for a capacity below 1, a rate that is
// negative, NaN or infinite, one the buckets cannot represent (above 1e9/s,
// or too small for the capacity), or an invalid option; every capacity in
// [1, 1e9] and every rate 0 or in [1e-6, 1e9] is accepted. Options:
// admit.WithClock, WithMaxKeys, WithPolicy, WithShards.
func New(capacity int64, refillPerSecond float64, opts ...admit.Option) (*Limiter, error) {
	cfg, err := admit.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	p, err := refill.NewParams(capacity, refillPerSecond)
	if err != nil {
		return nil, err
	}
	maxKeys := cfg.MaxKeys
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	n := cfg.Shards
	switch {
	case n == 0:
		n = defaultShards
		for n > 1 && n*minPerShard > maxKeys {
			n >>= 1
		}
	case n > maxKeys:
		return nil, fmt.Errorf("%w: WithShards(%d) exceeds the key bound %d", admit.ErrInvalidConfig, n, maxKeys)
	}
	l := &Limiter{
		shards:   make([]shard, n),
		mask:     uint64(n - 1),
		seed:     maphash.MakeSeed(),
		p:        p,
		clk:      refill.NewClock(cfg.Clock),
		capacity: capacity,
		maxKeys:  maxKeys,
		refuse:   Policy(cfg.KeyPolicy) == RefuseNew,
	}
	l.errFull = fmt.Errorf("%w: keyed: no room for a new key: its shard holds its share of WithMaxKeys(%d) in live buckets (RefuseNew)", admit.ErrUnavailable, maxKeys)
	// Split the bound exactly: the first maxKeys%n shards hold one more.
	each, extra := maxKeys/n, maxKeys%n
	for i := range l.shards {
		s := &l.shards[i]
		s.max = each
		if i < extra {
			s.max++
		}
		s.index = make(map[string]int32)
		s.head, s.tail, s.free = nilSlot, nilSlot, nilSlot
	}
	return l, nil
}

// Allow reports whether one token was taken from key's bucket:
// AllowN(ctx, key, 1).Allowed, without a context. It never blocks.
func (l *Limiter) Allow(key string) bool {
	d, _ := l.allow(key, 1)
	return d.Allowed
}

// AllowN takes n tokens from key's bucket if it holds them, creating the
// bucket full if key is not held, and returns the decision; it never blocks
// and does not consult ctx. Every string, the empty one included, is an
// ordinary key.
//
// n == 0 is a peek: Allowed is true and nothing is consumed. n < 0 or n
// above the capacity returns Allowed == false and an error wrapping
// admit.ErrUnsatisfiable, and touches no bucket. Under RefuseNew, a new key
// that finds no room returns Allowed == false and an error wrapping
// admit.ErrUnavailable (see the package doc).
//
// Decision.RetryAfter (denied) and Decision.ResetAfter are exact: the
// bucket holds n tokens, or is full, after exactly that long and not a
// nanosecond before, unless other calls take from it meanwhile. A wait that
// will never end (a zero rate, or past the clock's horizon of about 146
// years) is reported as the largest time.Duration.
func (l *Limiter) AllowN(_ context.Context, key string, n int64) (admit.Decision, error) {
	if n < 0 || n > l.capacity {
		return admit.Decision{Limit: l.capacity}, fmt.Errorf("%w: n=%d is outside [0, capacity %d]", admit.ErrUnsatisfiable, n, l.capacity)
	}
	return l.allow(key, n)
}

// allow is AllowN for 0 <= n <= capacity.
func (l *Limiter) allow(key string, n int64) (admit.Decision, error) {
	// The clock is read outside the lock: the shard applies the later of
	// this reading and its own, so a reading that lost the race for the
	// lock to a later one is harmless (see the package doc).
	now := l.clk.Now()
	s := &l.shards[maphash.String(l.seed, key)&l.mask]
	s.mu.Lock()
	d, err := s.allow(l, key, l.p.Units(n), now)
	s.mu.Unlock()
	return d, err
}

// Len returns the number of keys held now. Keys whose buckets are full but
// not yet dropped are counted.
func (l *Limiter) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += s.n
		s.mu.Unlock()
	}
	return n
}

// Stats is a snapshot of a Limiter's key table and of the events that
// changed it since New.
type Stats struct {
	Keys    int // keys held now, as Len reports
	MaxKeys int // the bound (WithMaxKeys)
	Shards  int // the number of shards the bound is split over

	Inserts   uint64 // buckets created: a key first seen, or seen again after it was dropped or evicted
	Drops     uint64 // full buckets forgotten (exact: a full bucket equals a new one)
	Evictions uint64 // live buckets forgotten to make room (EvictLRU); each such client restarts full
	Refusals  uint64 // new keys refused for want of room (RefuseNew)
}

// Stats returns the limiter's counters. Each shard is read under its lock,
// so the counts of one shard are consistent with each other; the limiter as
// a whole is not stopped while they are summed.
func (l *Limiter) Stats() Stats {
	st := Stats{MaxKeys: l.maxKeys, Shards: len(l.shards)}
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		st.Keys += s.n
		st.Inserts += s.inserts
		st.Drops += s.drops
		st.Evictions += s.evictions
		st.Refusals += s.refusals
		s.mu.Unlock()
	}
	return st
}

// after returns how long from elapsed time t until the stream reaches v.
func (l *Limiter) after(t, v int64) time.Duration {
	w := l.p.Reach(t, v)
	if w > refill.Horizon {
		return never
	}
	return time.Duration(w - t)
}

// decision builds the Decision for a bucket whose empty point is z at
// elapsed time t, stream value v = V(t), after a call that was allowed or
// not; need is what a denied call asked for.
func (l *Limiter) decision(allowed bool, z, t, v, need int64) admit.Decision {
	d := admit.Decision{Allowed: allowed, Limit: l.capacity, Remaining: (v - z) >> l.p.Shift}
	if z > v-l.p.Cap { // not full
		d.ResetAfter = l.after(t, z+l.p.Cap)
	}
	if !allowed {
		d.RetryAfter = l.after(t, z+need)
	}
	return d
}

// nilSlot marks the end of a list of slots.
const nilSlot = -1

// DefaultMaxKeys is the key bound without WithMaxKeys: 2^20 keys, about
// 100 MiB at the measured bytes per key plus the keys' own bytes.
const DefaultMaxKeys = 1 << 20

// defaultShards is the shard count without WithShards, lowered so that each
// shard's share of the bound is at least minPerShard keys.
const (
	defaultShards = 256
	minPerShard   = 64
	maxShards     = 1 << 16
)

// shard is one lock's worth of keys, padded to two cache lines so that
// shards in use by different cores share no line (the adjacent-line
// prefetcher pairs lines).
type shard struct {
	shardState
	_ [128 - unsafe.Sizeof(shardState{})%128]byte
}

// shardState is a shard's fields; they require mu.
type shardState struct {
	mu    sync.Mutex
	last  int64            // latest elapsed time applied: time never moves back within a shard
	index map[string]int32 // key -> its slot in ents
	ents  []entry          // slots: a key's bucket and its place in the LRU list
	head  int32            // most recently used slot, or nilSlot
	tail  int32            // least recently used slot, or nilSlot
	free  int32            // first free slot, chained through entry.next, or nilSlot
	n     int              // keys held
	max   int              // this shard's share of the bound

	inserts, drops, evictions, refusals uint64
}

// entry is one held key. The key's bytes are shared with the map's copy of
// the key; key is kept here so that a slot can be unmapped from the LRU end.
type entry struct {
	key        string
	z          int64 // empty point: balance = min(cap, V(t) - z)
	prev, next int32 // LRU neighbours (prev is more recent), or nilSlot
}

// allow is the whole decision for one call, under s.mu; need is in units.
func (s *shard) allow(l *Limiter, key string, need, now int64) (admit.Decision, error) {
	t := max(now, s.last)
	s.last = t
	v := l.p.V(t)
	capU := l.p.Cap
	full := v - capU // a bucket whose z is at most this is full
	i, ok := s.index[key]
	if !ok {
		if need == 0 { // a peek at a key not held: a full bucket, and nothing to store
			s.sweep(full, 2)
			return l.decision(true, full, t, v, 0), nil
		}
		s.sweep(full, 2)
		if s.n >= s.max && !s.makeRoom(l) {
			return s.refusal(l, t), l.errFull
		}
		z := full + need // need <= capacity: always admitted
		s.insert(key, z)
		return l.decision(true, z, t, v, 0), nil
	}
	e := &s.ents[i]
	z := max(e.z, full)
	allowed := v-z >= need
	if allowed {
		z += need
		e.z = z
	}
	if z <= full {
		// Full after this call (only a peek leaves a bucket full): forget
		// it now, which is exact.
		s.remove(i)
		s.drops++
	} else {
		s.touch(i)
	}
	s.sweep(full, 2)
	return l.decision(allowed, z, t, v, need), nil
}

// sweep drops up to k full buckets from the least recently used end.
// Amortised O(1): each slot is dropped at most once per insertion.
func (s *shard) sweep(full int64, k int) {
	for ; k > 0 && s.tail != nilSlot && s.ents[s.tail].z <= full; k-- {
		s.remove(s.tail)
		s.drops++
	}
}

// makeRoom frees a slot in a shard at its share of the bound whose least
// recently used bucket is live (sweep has dropped a full one), by the
// limiter's policy, and reports whether it did.
func (s *shard) makeRoom(l *Limiter) bool {
	if l.refuse || s.tail == nilSlot {
		s.refusals++
		return false
	}
	s.remove(s.tail)
	s.evictions++
	return true
}

// refusal is the Decision for a new key refused at elapsed time t: retry
// once the least recently used bucket is full and can be dropped.
func (s *shard) refusal(l *Limiter, t int64) admit.Decision {
	d := admit.Decision{Limit: l.capacity, RetryAfter: never, ResetAfter: never}
	if s.tail != nilSlot {
		w := l.after(t, s.ents[s.tail].z+l.p.Cap)
		d.RetryAfter, d.ResetAfter = w, w
	}
	return d
}

// insert stores a new key with empty point z at the most recently used end.
func (s *shard) insert(key string, z int64) {
	// The key is cloned so that the map does not keep alive a larger buffer
	// the caller's string may point into (a request header, say); this is
	// the one allocation of a new key besides the map's and the slots'
	// amortised growth.
	key = strings.Clone(key)
	i := s.free
	if i != nilSlot {
		s.free = s.ents[i].next
	} else {
		if len(s.ents) >= math.MaxInt32 {
			panic("keyed: shard slot index overflow") // unreachable: WithMaxKeys bounds a shard far below
		}
		i = int32(len(s.ents))
		s.ents = append(s.ents, entry{})
	}
	s.ents[i] = entry{key: key, z: z, prev: nilSlot, next: s.head}
	if s.head != nilSlot {
		s.ents[s.head].prev = i
	} else {
		s.tail = i
	}
	s.head = i
	s.index[key] = i
	s.n++
	s.inserts++
}

// unlink takes slot i out of the LRU list.
func (s *shard) unlink(i int32) {
	e := &s.ents[i]
	if e.prev != nilSlot {
		s.ents[e.prev].next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nilSlot {
		s.ents[e.next].prev = e.prev
	} else {
		s.tail = e.prev
	}
}

// touch moves slot i to the most recently used end.
func (s *shard) touch(i int32) {
	if s.head == i {
		return
	}
	s.unlink(i)
	e := &s.ents[i]
	e.prev, e.next = nilSlot, s.head
	s.ents[s.head].prev = i // head != nilSlot: i was in the list and is not the head
	s.head = i
}

// remove forgets slot i's key and frees the slot.
func (s *shard) remove(i int32) {
	s.unlink(i)
	e := &s.ents[i]
	delete(s.index, e.key)
	*e = entry{next: s.free} // drop the key's bytes for the collector
	s.free = i
	s.n--
}

// shardOf returns the index of key's shard, for tests.
func (l *Limiter) shardOf(key string) int {
	return int(maphash.String(l.seed, key) & l.mask)
}
