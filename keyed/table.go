package keyed

import (
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// table is a shard's index from key to entry: open addressing with linear
// probing over n slots of entry pointers, n a multiple of 8 but not
// necessarily a power of two (tables grow by 3/2 and 4/3 in turn, so that
// their load stays between 1/2 and 3/4), and beside them one tag byte per
// slot, eight to a word: a byte of the key's hash (tagOf), or 0 for an
// empty slot. A key's home is its hash's bits below the shard's, reduced to
// [0, n) by a multiply (home); its tag is the hash's low byte, which the
// home does not use. Deletion shifts later entries of the run back (no
// tombstones), so a probe stops at the first empty tag.
//
// A probe reads the tags, eight slots a load, and follows only the slots
// whose tag equals its key's: a lookup dereferences no other key's entry
// except on a tag collision (1 in 255 per slot of its run). That matters
// beyond the loads saved: an entry's line holds the state word its own
// key's callers CAS, so reading another key's entry on the way to one's
// own moves that line between cores whenever the two keys are used from
// different cores (true sharing of a line neither call needs).
//
// Readers probe without a lock; only the shard's lock holder writes, every
// tag word and slot with an atomic store, and replaces a full table by a
// new one published through shard.tab and the shard's view (grow). What a
// lock-free reader may see: a writer's backward shift can move the entry it
// looks for behind it, or show it twice; a tag can disagree with its slot
// for a moment (a slot is stored before its tag, a tag cleared before its
// slot); a grow can leave it probing the old arrays, or a size and arrays
// of different tables (each in bounds: see view). It then finds the entry
// (the same object: entries are shared by old and new arrays) or misses
// it. A miss is never trusted: the caller takes the shard's lock and looks
// again (Limiter.slow). A hit is never wrong: the key is compared, and an
// entry removed since is dead.
type table struct {
	slots []atomic.Pointer[entry]
	tags  []atomic.Uint64 // len(slots)/8 words; byte i%8 of tags[i/8] is slot i's tag
	n     uint64          // len(slots)
}

// minSlots is a shard's first table.
const minSlots = 8

// Tag words: lsb has the low bit of every byte set, msb the high one, low7
// the other seven.
const (
	lsb  = 0x0101010101010101
	msb  = 0x8080808080808080
	low7 = 0x7f7f7f7f7f7f7f7f
)

func newTable(n uint64) *table {
	return &table{slots: make([]atomic.Pointer[entry], n), tags: make([]atomic.Uint64, n/8), n: n}
}

// nextSize is the size of the table that replaces one of n slots: 16 after
// 8, then ×3/2 from a power of two and ×4/3 from the size between, so
// every size is 8·2^k or 12·2^k.
func nextSize(n uint64) uint64 {
	switch {
	case n < 16:
		return 16
	case n&(n-1) == 0:
		return n + n/2
	}
	return n / 3 * 4
}

// full reports whether a table of n slots holding used keys must grow
// before one more is stored: its load would pass 3/4.
func full(used int, n uint64) bool { return uint64(used+1)*4 > n*3 }

// tagOf is a hash's tag: its low byte, with 0 (the empty slot's) read as
// 0xff.
func tagOf(h uint64) uint64 {
	t := h & 0xff
	return t | (t-1)>>56&0xff
}

// home is the first slot a key's probe looks at in a table of n slots: hx
// (the key's hash shifted left past its shard bits, see Limiter.hshift)
// scaled to [0, n) by its high bits, which leaves the tag's low byte out.
func home(hx, n uint64) uint64 {
	i, _ := bits.Mul64(hx, n)
	return i
}

// zeroBytes returns a word with the high bit of byte j set exactly when
// byte j of w is 0 (no borrow crosses bytes, unlike the usual
// (w − lsb) &^ w & msb, so every flag is exact, not only the lowest).
func zeroBytes(w uint64) uint64 {
	return ^((w&low7 + low7) | w) & msb
}

// firstZero returns a word whose lowest set bit is the high bit of the
// first byte of w that is 0 (none if no byte is): the usual
// (w − lsb) &^ w & msb, whose higher flags may be wrong (a borrow) but
// whose lowest is exact.
func firstZero(w uint64) uint64 { return (w - lsb) &^ w & msb }

// group returns, for the tag word w and the tag t, the flags (the high bit
// of each byte) of the slots at or after offset off in w whose tag is t
// and come before the first empty slot at or after off, and whether there
// is such an empty slot (the probe's end).
func group(w, t, off uint64) (match uint64, end bool) {
	from := ^uint64(0) << (off * 8)
	empty := zeroBytes(w) & from
	match = zeroBytes(w^t*lsb) & from
	if empty != 0 {
		match &= empty&-empty - 1
	}
	return match, empty != 0
}

// probe is the lookup shared by the lock-free readers (view) and the lock
// holder (table): key's entry (hx its shifted hash, t its tag) among n
// slots and their tags, or nil. It dereferences only slots whose tag is
// t, and stops at the first empty tag or after one pass over the tags, so
// that it ends even while writers shift entries. With any, it returns the
// first entry whose tag is t without comparing its key (or reading its
// line at all: see Limiter.decide). h is the limiter's test hooks (nil
// outside tests).
func probe(n uint64, tags *atomic.Uint64, slots *atomic.Pointer[entry], hx, t uint64, key string, any bool, h *hooks) *entry {
	i := home(hx, n)
	g, off := i/8, i%8
	for range n/8 + 1 {
		match, end := group(tagAt(tags, g).Load(), t, off)
		for ; match != 0; match &= match - 1 {
			e := slotAt(slots, g*8+uint64(bits.TrailingZeros64(match))/8).Load()
			if e != nil && (any || e.key == key) {
				return e
			}
			h.collision()
		}
		if end {
			return nil
		}
		if g++; g*8 == n {
			g = 0
		}
		off = 0
	}
	return nil
}

// tagAt returns &tags[g] without a bounds check: every caller's g is below
// the length of the tag array tags starts (see view).
func tagAt(tags *atomic.Uint64, g uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Add(unsafe.Pointer(tags), g*8))
}

// slotAt returns &slots[i], likewise.
func slotAt(slots *atomic.Pointer[entry], i uint64) *atomic.Pointer[entry] {
	return (*atomic.Pointer[entry])(unsafe.Add(unsafe.Pointer(slots), i*slotSize))
}

// slotSize is the size of a table slot.
const slotSize = uint64(unsafe.Sizeof(atomic.Pointer[entry]{}))

// hooks are a test's probes into one Limiter's slow paths (Limiter.test);
// nil outside tests, where every hook does nothing. Each Limiter has its
// own, so tests that use them may run in parallel with any other.
type hooks struct {
	// collisions counts the entries a probe dereferenced that were not
	// its key's (a tag collision, or a slot in flux).
	collisions atomic.Int64
	// busy, if set, is called by a sweep that found a multi-limit key's
	// lock held, just before it waits for it (dropMulti).
	busy func()
}

// collision is called for each entry a probe dereferenced that was not its
// key's. It is off the path of a probe that finds its key's entry first.
func (h *hooks) collision() {
	if h != nil {
		h.collisions.Add(1)
	}
}

// keyBusy is called by a sweep about to wait for a key's lock.
func (h *hooks) keyBusy() {
	if h != nil && h.busy != nil {
		h.busy()
	}
}

func (tb *table) find(hx, t uint64, key string, h *hooks) *entry {
	return probe(tb.n, &tb.tags[0], &tb.slots[0], hx, t, key, false, h)
}

// setTag stores tag t (0 to clear) for slot i. Requires the shard's lock
// (the word's other bytes are the lock holder's to change).
func (tb *table) setTag(i, t uint64) {
	w := &tb.tags[i/8]
	sh := i % 8 * 8
	w.Store(w.Load()&^(0xff<<sh) | t<<sh)
}

// tag returns slot i's tag. Requires the shard's lock.
func (tb *table) tag(i uint64) uint64 { return tb.tags[i/8].Load() >> (i % 8 * 8) & 0xff }

// slot returns the index of e (shifted hash hx) in the table; e must be
// there. Requires the shard's lock.
func (tb *table) slot(hx uint64, e *entry) uint64 {
	i := home(hx, tb.n)
	for tb.slots[i].Load() != e {
		if i++; i == tb.n {
			i = 0
		}
	}
	return i
}

// put stores e (shifted hash hx, tag t) at the first empty slot of its
// probe sequence: the slot first, then its tag, so that a reader that sees
// the tag finds the entry. Requires the shard's lock and a free slot.
func (tb *table) put(hx, t uint64, e *entry) {
	i := home(hx, tb.n)
	for tb.tag(i) != 0 {
		if i++; i == tb.n {
			i = 0
		}
	}
	tb.slots[i].Store(e)
	tb.setTag(i, t)
}

// remove empties slot i and shifts back the entries after it in its run
// that a probe from their home would no longer reach; hash gives an
// entry's hash. Requires the shard's lock.
func (tb *table) remove(i uint64, hash func(*entry) (hx, t uint64)) {
	n := tb.n
	for j := next(i, n); ; j = next(j, n) {
		e := tb.slots[j].Load()
		if e == nil {
			break
		}
		// Move j into the hole i when j's home does not lie cyclically in
		// (i, j], that is when a probe from j's home passes i.
		hx, t := hash(e)
		if h := home(hx, n); dist(h, j, n) >= dist(i, j, n) {
			tb.slots[i].Store(e)
			tb.setTag(i, t)
			i = j
		}
	}
	tb.setTag(i, 0)
	tb.slots[i].Store(nil)
}

// next is the slot after i in a table of n.
func next(i, n uint64) uint64 {
	if i++; i == n {
		return 0
	}
	return i
}

// dist is how many slots forward from a to b, cyclically in a table of n.
func dist(a, b, n uint64) uint64 {
	if b >= a {
		return b - a
	}
	return b + n - a
}
