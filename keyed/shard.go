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
	// absentAt is the latest time applied to a key of the shard that it
	// does not hold: one removed (its latest time), or one a peek found
	// absent (the peek's time, which stores nothing else). A new bucket
	// starts no earlier (see slow), so that a key seen again, or first
	// admitted, with a reading older than one already applied to it finds
	// no more than a bucket that had seen that later time.
	absentAt int64
	hand     uint64 // the next slot the hand looks at (mod the table's size)

	inserts, drops, evictions, refusals uint64
}

// view is a shard's current table as lock-free readers see it: its size
// and the addresses of its tags and slots, with no pointer to follow
// before them. The views of all shards are packed in one array
// (Limiter.views), 32 bytes each (two a line, none across lines), so that
// the first loads of every probe hit lines every call reads (256 views are
// 8 KB), not the shard's own line, which the lock and the counters share.
// Written only by a grow, under the shard's lock: slots, then tags, then
// n; read in the opposite order, n first. A reader that sees a size sees
// that table's arrays or a later, larger one's, and tables only grow, so
// every index it forms is inside the arrays it reads (a size from an
// older, smaller table, or tags and slots from two tables, only misplace
// the probe, which then misses or compares a key that is not its own; a
// miss is never trusted and a key compared is never wrong).
type view struct {
	n     atomic.Uint64 // 0 before the first table
	tags  atomic.Pointer[atomic.Uint64]
	slots atomic.Pointer[atomic.Pointer[entry]]
	_     uint64
}

// find returns key's entry (shifted hash hx, tag t) or nil, without the
// lock: the lock-free probe of the table's doc. h is the limiter's test
// hooks (nil outside tests).
func (v *view) find(hx, t uint64, key string, h *hooks) *entry {
	n := v.n.Load()
	if n == 0 {
		return nil
	}
	return probe(n, v.tags.Load(), v.slots.Load(), hx, t, key, false, h)
}

// entryHash returns e's key's shifted hash and tag.
func (l *Limiter) entryHash(e *entry) (hx, t uint64) {
	h := l.hash(e.key)
	return l.hx(h), tagOf(h)
}

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
	return max(t, s.absentAt)
}

// insert stores a new entry e for a key (hash h) whose bucket is full at
// elapsed time fullAt. The caller holds mu, has reserved a key in the
// bound, and has let the hand look (handBefore).
func (s *shard) insert(l *Limiter, e *entry, h uint64, fullAt int64) {
	// The entry (newEntry) and the table's amortised growth are the
	// allocations a new key costs.
	tb := s.tab.Load()
	if tb == nil || full(s.used, tb.n) {
		tb = s.grow(l, &l.views[l.shardIndex(h)], tb)
	}
	tb.put(l.hx(h), tagOf(h), e)
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
	n := uint64(minSlots)
	if old != nil {
		n = nextSize(old.n)
	}
	tb := newTable(n)
	if old != nil {
		for i := range old.slots {
			if e := old.slots[i].Load(); e != nil {
				hx, t := l.entryHash(e)
				tb.put(hx, t, e)
			}
		}
	}
	s.tab.Store(tb)
	v.slots.Store(&tb.slots[0])
	v.tags.Store(&tb.tags[0])
	v.n.Store(n)
	return tb
}

// look moves the hand one slot: the entry there, if its bucket is full at
// t, is dropped. Requires mu.
func (s *shard) look(l *Limiter, tb *table, t int64) {
	i := s.handSlot(tb)
	if e := tb.slots[i].Load(); e != nil && l.drop(e, t) {
		s.unlink(l, tb, i, t)
		s.drops++
	}
}

// unlink removes the (now dead) entry at slot i. Requires mu.
func (s *shard) unlink(l *Limiter, tb *table, i uint64, t int64) {
	e := tb.slots[i].Load()
	s.absentAt = max(s.absentAt, e.last(), t)
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
		i := s.handSlot(tb)
		e := tb.slots[i].Load()
		if e == nil {
			continue
		}
		if l.drop(e, t) {
			s.unlink(l, tb, i, t)
			s.drops++
			s.hand = i // the shift may have moved an entry into i
			return true
		}
		if a := e.at.Load(); a&refBit != 0 {
			// Second chance. A call that sets the bit again meanwhile
			// makes the CAS fail; the next turn looks again.
			e.at.CompareAndSwap(a, a&^refBit)
			continue
		}
		st := e.st.Load()
		if l.kill(e, st) {
			// An evicted key restarts no earlier than the latest time it
			// has seen (retiredTime, after the kill). A multi-limit key's
			// time is exact (die).
			if st < multiTag {
				t = max(t, l.retiredTime(e.at.Load(), st))
			}
			s.unlink(l, tb, i, t)
			s.evictions++
			return true
		}
		s.hand = i // a call changed the state; look at the same slot again
	}
	return false
}

// handSlot returns the slot the hand is at and moves it one on. Requires mu.
func (s *shard) handSlot(tb *table) uint64 {
	i := s.hand
	if i >= tb.n {
		i = 0
	}
	s.hand = i + 1
	return i
}
