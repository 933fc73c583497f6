package keyed

import "sync/atomic"

// table is a shard's index from key to entry: open addressing with linear
// probing over a power-of-two array of entry pointers. A key's home is the
// low bits of its hash (the shard took the high bits). Readers probe it
// without a lock; only the shard's lock holder writes it, every slot with an
// atomic store, and replaces a full table by a new one published through
// shard.tab (grow). Deletion shifts later entries of the run back (no
// tombstones), so a probe stops at the first nil slot.
//
// What a lock-free reader may see: a writer's backward shift can move the
// entry it looks for behind it, or show it twice; a grow can leave it
// probing the old array. It then finds the entry (the same object: entries
// are shared by old and new arrays) or misses it. A miss is never trusted:
// the caller takes the shard's lock and looks again (Limiter.slow). A hit is
// never wrong: the key is compared, and an entry removed since is dead.
type table struct {
	slots []atomic.Pointer[entry]
	mask  uint64
}

// minSlots is a shard's first table.
const minSlots = 8

func newTable(n int) *table {
	return &table{slots: make([]atomic.Pointer[entry], n), mask: uint64(n - 1)}
}

// find returns key's entry, or nil; h is key's hash. It stops after one
// pass over the array, so that it ends even while writers shift entries.
func (tb *table) find(h uint64, key string) *entry {
	i := h & tb.mask
	for range len(tb.slots) {
		e := tb.slots[i].Load()
		if e == nil {
			return nil
		}
		if e.key == key {
			return e
		}
		i = (i + 1) & tb.mask
	}
	return nil
}

// slot returns the index of e in the table; e must be there. Requires the
// shard's lock.
func (tb *table) slot(h uint64, e *entry) uint64 {
	i := h & tb.mask
	for tb.slots[i].Load() != e {
		i = (i + 1) & tb.mask
	}
	return i
}

// put stores e at the first empty slot of its probe sequence. Requires the
// shard's lock and a free slot.
func (tb *table) put(h uint64, e *entry) {
	i := h & tb.mask
	for tb.slots[i].Load() != nil {
		i = (i + 1) & tb.mask
	}
	tb.slots[i].Store(e)
}

// remove empties slot i and shifts back the entries after it in its run
// that a probe from their home would no longer reach; hash gives an entry's
// hash. Requires the shard's lock.
func (tb *table) remove(i uint64, hash func(*entry) uint64) {
	for j := (i + 1) & tb.mask; ; j = (j + 1) & tb.mask {
		e := tb.slots[j].Load()
		if e == nil {
			break
		}
		// Move j into the hole i when j's home does not lie cyclically in
		// (i, j], that is when a probe from j's home passes i.
		h := hash(e) & tb.mask
		if (j-h)&tb.mask >= (j-i)&tb.mask {
			tb.slots[i].Store(e)
			i = j
		}
	}
	tb.slots[i].Store(nil)
}
