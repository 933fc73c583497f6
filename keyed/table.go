package keyed

// table is a shard's index from key to slot: open addressing with linear
// probing over a power-of-two array of words, each 0 (empty) or
// tag<<32 | (slot+1), where tag is the low 32 bits of the key's hash. The
// key's home position is tag & mask, so the table can grow and shift words
// without the keys; a tag match is confirmed by comparing the slot's key.
// Deletion shifts later words of the run back (no tombstones), so a lookup
// stops at the first empty word.
//
// It replaces a map[string]int32, which would hash each key a second time
// (the limiter already hashed it to pick the shard) and cost 24 bytes per
// map slot; this costs 8 bytes per word at a load factor kept in
// (3/8, 3/4] once it has grown.
type table struct {
	words []uint64 // len is a power of two, or 0 before the first insert
	used  int      // words in use
}

// minWords is the first allocation.
const minWords = 8

// home is the position at which a key with this tag starts its probe.
func (tb *table) home(tag uint32) uint32 { return tag & uint32(len(tb.words)-1) }

// find returns the slot of key, whose hash's low 32 bits are tag, or
// nilSlot; ents holds the slots.
func (tb *table) find(tag uint32, key string, ents []entry) int32 {
	if len(tb.words) == 0 {
		return nilSlot
	}
	mask := uint32(len(tb.words) - 1)
	for i := tag & mask; ; i = (i + 1) & mask {
		w := tb.words[i]
		if w == 0 {
			return nilSlot
		}
		if uint32(w>>32) == tag {
			if slot := int32(uint32(w)) - 1; ents[slot].key == key {
				return slot
			}
		}
	}
}

// insert adds slot under tag. The key must not be present.
func (tb *table) insert(tag uint32, slot int32) {
	if (tb.used+1)*4 > len(tb.words)*3 {
		tb.grow()
	}
	tb.put(uint64(tag)<<32 | uint64(slot+1))
	tb.used++
}

// put stores w at the first empty word of its probe sequence.
func (tb *table) put(w uint64) {
	mask := uint32(len(tb.words) - 1)
	i := uint32(w>>32) & mask
	for tb.words[i] != 0 {
		i = (i + 1) & mask
	}
	tb.words[i] = w
}

// grow doubles the array and re-places every word: O(words), once per
// doubling, so amortised O(1) per insertion.
func (tb *table) grow() {
	old := tb.words
	tb.words = make([]uint64, max(minWords, 2*len(old)))
	for _, w := range old {
		if w != 0 {
			tb.put(w)
		}
	}
}

// remove deletes the word for slot, whose key's tag is tag, and shifts back
// the words after it in its run that may no longer be reachable.
func (tb *table) remove(tag uint32, slot int32) {
	mask := uint32(len(tb.words) - 1)
	want := uint64(tag)<<32 | uint64(slot+1)
	i := tag & mask
	for tb.words[i] != want {
		i = (i + 1) & mask
	}
	// Backward shift: move j into the hole i when j's home does not lie
	// cyclically in (i, j], that is when a probe from j's home passes i.
	for j := (i + 1) & mask; tb.words[j] != 0; j = (j + 1) & mask {
		h := tb.home(uint32(tb.words[j] >> 32))
		if (j-h)&mask >= (j-i)&mask {
			tb.words[i] = tb.words[j]
			i = j
		}
	}
	tb.words[i] = 0
	tb.used--
}
