package keyed

import (
	"math"
	"strings"
	"sync"
	"unsafe"
)

// nilSlot marks the end of a list of slots, or no slot.
const nilSlot = -1

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
	last  int64   // latest elapsed time applied: time never moves back within a shard
	index table   // key -> its slot in ents
	ents  []entry // slots: a key's bucket and its place in the LRU list
	head  int32   // most recently used slot, or nilSlot
	tail  int32   // least recently used slot, or nilSlot
	free  int32   // first free slot, chained through entry.next, or nilSlot
	n     int     // keys held
	max   int     // this shard's share of the bound

	inserts, drops, evictions, refusals uint64
}

// entry is one held key: 32 bytes. The key is kept so that a tag match can
// be confirmed and so that a slot can be unindexed from the LRU end.
type entry struct {
	key        string
	z          int64 // empty point: balance = min(cap, V(t) - z)
	prev, next int32 // LRU neighbours (prev is more recent), or nilSlot
}

// outcome is what one call did, for the Decision built outside the lock.
type outcome struct {
	t, v    int64 // the elapsed time applied and V(t)
	z       int64 // the key's empty point after the call, clamped to v - cap
	allowed bool
	refused bool // a new key found no room (RefuseNew); z is the LRU key's
}

// take is the whole decision for one call, under s.mu: key (whose hash is
// h) asks for need units at clock reading now.
func (s *shard) take(l *Limiter, key string, h uint64, need, now int64) outcome {
	t := max(now, s.last)
	s.last = t
	v := l.p.V(t)
	full := v - l.p.Cap // a bucket whose z is at most this is full
	tag := uint32(h)
	i := s.index.find(tag, key, s.ents)
	if i == nilSlot {
		s.sweep(l, full, 2)
		if need == 0 { // a peek at a key not held: a full bucket, and nothing to store
			return outcome{t: t, v: v, z: full, allowed: true}
		}
		if s.n >= s.max && !s.makeRoom(l) {
			return outcome{t: t, v: v, z: s.ents[s.tail].z, refused: true}
		}
		z := full + need // need <= capacity: a new bucket always has it
		s.insert(key, tag, z)
		return outcome{t: t, v: v, z: z, allowed: true}
	}
	e := &s.ents[i]
	z := max(e.z, full)
	ok := v-z >= need
	if ok {
		z += need
		e.z = z
	}
	if z <= full {
		// Full after this call (only a peek leaves a bucket full): forget
		// it now, which is exact.
		s.remove(l, i)
		s.drops++
	} else if s.head != i {
		s.touch(i)
	}
	s.sweep(l, full, 2)
	return outcome{t: t, v: v, z: z, allowed: ok}
}

// sweep drops up to k full buckets from the least recently used end.
// Amortised O(1): each slot is dropped at most once per insertion.
func (s *shard) sweep(l *Limiter, full int64, k int) {
	for ; k > 0 && s.tail != nilSlot && s.ents[s.tail].z <= full; k-- {
		s.remove(l, s.tail)
		s.drops++
	}
}

// makeRoom frees a slot in a shard at its share of the bound whose least
// recently used bucket is live, by the limiter's policy, and reports whether
// it did. The tail is live here: the sweep before it either dropped two
// buckets, leaving room, or stopped at a live tail.
func (s *shard) makeRoom(l *Limiter) bool {
	if l.refuse || s.tail == nilSlot {
		s.refusals++
		return false
	}
	s.remove(l, s.tail)
	s.evictions++
	return true
}

// insert stores a new key with empty point z at the most recently used end.
func (s *shard) insert(key string, tag uint32, z int64) {
	// The key is cloned so that the limiter does not keep alive a larger
	// buffer the caller's string may point into (a request header, say).
	// With the slot array's and the table's amortised growth, this is the
	// only allocation a new key costs.
	key = strings.Clone(key)
	i := s.free
	if i != nilSlot {
		s.free = s.ents[i].next
	} else {
		if len(s.ents) >= math.MaxInt32-1 {
			panic("keyed: shard slot overflow") // unreachable: a shard's share of the bound is far smaller
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
	s.index.insert(tag, i)
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

// touch moves slot i, which is not the head, to the most recently used end.
func (s *shard) touch(i int32) {
	s.unlink(i)
	e := &s.ents[i]
	e.prev, e.next = nilSlot, s.head
	s.ents[s.head].prev = i // the list held i and another slot, its head
	s.head = i
}

// remove forgets slot i's key and frees the slot.
func (s *shard) remove(l *Limiter, i int32) {
	s.unlink(i)
	e := &s.ents[i]
	s.index.remove(uint32(l.hash(e.key)), i)
	*e = entry{next: s.free} // let the collector have the key's bytes
	s.free = i
	s.n--
}
