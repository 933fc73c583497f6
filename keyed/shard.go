package keyed

import (
	"math"
	"sync"
	"sync/atomic"
	"unsafe"
)

// shard is one lock's worth of keys, padded to two cache lines so that
// shards written by different cores share no line (the adjacent-line
// prefetcher pairs lines). A held key's call only reads tab.
type shard struct {
	shardState
	_ [128 - unsafe.Sizeof(shardState{})%128]byte
}

// shardState is a shard's fields. mu is held to change the table (insert,
// remove, grow), to move the hand, and to read or write the counters; tab
// and floor are also read without it.
type shardState struct {
	mu  sync.Mutex
	tab atomic.Pointer[table] // the current table, for the lock holder; nil before the first insertion
	// floor is a lower bound on the elapsed time at which each held key's
	// bucket is full (math.MaxInt64 when the shard holds none): no bucket
	// here is full before it. Written under mu; read by makeRoom without
	// it. Each entry's full-at time only moves later (z only grows), so a
	// bound computed once stays a bound; insert lowers it for the new key,
	// and sweep makes it exact.
	floor atomic.Int64
	// minE is the entry whose full-at time set floor, or nil: floor is
	// exact while minE's full-at time still equals it (exact), which
	// makeRoom checks in O(1) before it trusts a floor.
	minE *entry
	used int // keys in the table
	// removedAt is the latest time applied to any key removed from the
	// shard; a new bucket starts no earlier (see slow).
	removedAt int64
	hand      uint64 // the next slot the hand looks at (mod the table's size)

	inserts, drops, evictions, refusals uint64
}

// view is a shard's current table as lock-free readers see it: its slots
// and size − 1, with no pointer to follow before the slots. The views of
// all shards are packed in one array (Limiter.views), 16 bytes each, so
// that the first load of every probe hits lines every call reads (256
// views are 4 KB), not the shard's own line, which the lock and the
// counters share. Written only by a grow, under the shard's lock: base
// before mask, and tables only grow.
type view struct {
	base atomic.Pointer[atomic.Pointer[entry]]
	mask atomic.Uint64
}

// find returns key's entry (hash h) or nil, without the lock: the
// lock-free probe of the table's doc. mask is loaded before base: a reader
// that sees a mask sees that table's base or a later, larger one's, so
// every index it forms is inside the array base points to (a mask from an
// older, smaller table with a newer base only misplaces the probe, which
// then misses, and a miss is never trusted).
func (v *view) find(h uint64, key string) *entry {
	mask := v.mask.Load()
	base := unsafe.Pointer(v.base.Load())
	for i, n := h&mask, mask; base != nil; i, n = (i+1)&mask, n-1 {
		e := (*atomic.Pointer[entry])(unsafe.Add(base, i*slotSize)).Load()
		if e == nil || e.key == key {
			return e
		}
		if n == 0 { // one pass over the array: the probe ends while writers shift entries
			return nil
		}
	}
	return nil
}

// prefetch starts fetching the line of hash h's home slot, for a call that
// reads the clock next: the clock read waits for earlier loads, not for a
// prefetch, so the cache miss overlaps it. The address is formed as a
// uintptr and never used as a pointer: a base and a mask from different
// tables (a grow meanwhile), or no table yet (nil and 0), give an address
// outside the slots, which is harmless, as a prefetch never faults.
func (v *view) prefetch(h uint64) {
	prefetch(uintptr(unsafe.Pointer(v.base.Load())) + uintptr(h&v.mask.Load()*slotSize))
}

// slotSize is the size of a table slot.
const slotSize = uint64(unsafe.Sizeof(atomic.Pointer[entry]{}))

// hash is e's key's hash.
func (l *Limiter) entryHash(e *entry) uint64 { return l.hash(e.key) }

// handBefore lets the hand look at two slots before an insertion at
// elapsed time t, dropping the full buckets it finds there (amortised O(1)
// cleaning without a goroutine), and returns the time the new bucket
// starts at: t, or later if a bucket dropped had seen a later time (a new
// bucket starts no earlier than any removed from its shard). Requires mu.
func (s *shard) handBefore(l *Limiter, t int64) int64 {
	if tb := s.tab.Load(); tb != nil {
		for range 2 {
			s.look(l, tb, t)
		}
	}
	return max(t, s.removedAt)
}

// insert stores a new entry e for a key (hash h) whose bucket is full at
// elapsed time fullAt. The caller holds mu, has reserved a key in the
// bound, and has let the hand look (handBefore).
func (s *shard) insert(l *Limiter, e *entry, h uint64, fullAt int64) {
	// The entry (newEntry) and the table's amortised growth are the
	// allocations a new key costs.
	tb := s.tab.Load()
	if tb == nil || (s.used+1)*4 > len(tb.slots)*3 {
		tb = s.grow(l, &l.views[h>>l.shift], tb)
	}
	tb.put(h, e)
	s.used++
	s.inserts++
	if fullAt < s.floor.Load() {
		s.floor.Store(fullAt)
		s.minE = e
	}
}

// grow publishes a table twice the size (or the first one) holding every
// entry of old, to the lock holder (tab) and to lock-free readers through
// v, the shard's view. Readers still probing old find the same entries
// there.
func (s *shard) grow(l *Limiter, v *view, old *table) *table {
	n := minSlots
	if old != nil {
		n = 2 * len(old.slots)
	}
	tb := newTable(n)
	if old != nil {
		for i := range old.slots {
			if e := old.slots[i].Load(); e != nil {
				tb.put(l.entryHash(e), e)
			}
		}
	}
	s.tab.Store(tb)
	v.base.Store(&tb.slots[0])
	v.mask.Store(tb.mask)
	return tb
}

// look moves the hand one slot: the entry there, if its bucket is full at
// t, is dropped. Requires mu.
func (s *shard) look(l *Limiter, tb *table, t int64) {
	i := s.hand & tb.mask
	s.hand = i + 1
	if e := tb.slots[i].Load(); e != nil && l.drop(e, t) {
		s.unlink(l, tb, i, t)
		s.drops++
	}
}

// unlink removes the (now dead) entry at slot i. Requires mu.
func (s *shard) unlink(l *Limiter, tb *table, i uint64, t int64) {
	e := tb.slots[i].Load()
	s.removedAt = max(s.removedAt, e.last(), t)
	if e == s.minE {
		s.minE = nil // floor stays a lower bound
	}
	tb.remove(i, l.entryHash)
	s.used--
	l.keys.Add(-1)
}

// sweep drops every bucket of the shard that is full at t and makes floor
// exact; it returns how many it dropped. O(table size). Requires mu.
func (s *shard) sweep(l *Limiter, t int64) int {
	tb := s.tab.Load()
	if tb == nil {
		return 0
	}
	n := 0
	floor := int64(math.MaxInt64)
	var minE *entry
	for i := uint64(0); i < uint64(len(tb.slots)); i++ {
		e := tb.slots[i].Load()
		if e == nil {
			continue
		}
		if l.drop(e, t) {
			// The shift may move an entry not yet looked at into slot i
			// (never one from before i to after it), so look at i again.
			s.unlink(l, tb, i, t)
			s.drops++
			n++
			i--
			continue
		}
		if at := l.fullAt(e); at < floor {
			floor, minE = at, e
		}
	}
	s.floor.Store(floor)
	s.minE = minE
	return n
}

// exact reports whether floor is the exact full-at time of a held bucket:
// that of minE, unchanged since it set floor. Requires mu.
func (s *shard) exact(l *Limiter) bool {
	return s.minE != nil && l.fullAt(s.minE) == s.floor.Load()
}

// evict forgets one live key chosen by the CLOCK hand: an entry whose
// reference bit is set has it cleared and is passed over (its second
// chance); the first found clear is evicted. It reports whether it removed
// a key; a bucket found full is dropped instead. Two turns of the hand
// always find one in a non-empty table. Requires mu.
func (s *shard) evict(l *Limiter, t int64) bool {
	tb := s.tab.Load()
	if tb == nil || s.used == 0 {
		return false
	}
	for range 2*len(tb.slots) + 1 {
		i := s.hand & tb.mask
		e := tb.slots[i].Load()
		if e == nil {
			s.hand = i + 1
			continue
		}
		if l.drop(e, t) {
			s.unlink(l, tb, i, t)
			s.drops++
			return true
		}
		if a := e.at.Load(); a&refBit != 0 {
			// Second chance. A call that sets the bit again meanwhile
			// makes the CAS fail; the next turn looks again.
			e.at.CompareAndSwap(a, a&^refBit)
			s.hand = i + 1
			continue
		}
		st := e.st.Load()
		if l.kill(e, st) {
			// An evicted key restarts no earlier than the latest time it
			// has seen, which for a single-limit key its time word alone
			// does not record (admissions store none): see lastTime.
			if st < multiTag {
				t = max(t, l.lastTime(e.at.Load(), st))
			}
			s.unlink(l, tb, i, t)
			s.evictions++
			s.hand = i + 1
			return true
		}
		// A call changed the state; look at the same slot again.
	}
	return false
}
