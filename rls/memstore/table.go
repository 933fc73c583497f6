package memstore

import (
	"math/bits"
	"unsafe"

	"github.com/admit-go/admit/rls/internal/tick"
)

// bucket is one key's state: debt d as of tick t under p (see package
// tick).
type bucket struct {
	p    tick.Params
	d, t int64
}

// slotBytes is what one slot of a table costs: its digest and its bucket.
const slotBytes = unsafe.Sizeof(digest{}) + unsafe.Sizeof(bucket{})

// Load factor: a table holds at most loadNum/loadDen of its slots.
const loadNum, loadDen = 4, 5

// minSlots is a new table's size.
const minSlots = 8

// table is one shard's buckets: open addressing with linear probing over
// two parallel arrays (digests, probed, and buckets), holding no pointer,
// so the collector never scans it.
//
// Invariants: every live digest is non-zero (the zero digest marks an
// empty slot) and sits at or after its home slot with no empty slot
// between them (cyclically); n live slots are at most loadNum/loadDen of
// len(keys). A removal shifts the following entries back (backward-shift
// deletion) instead of leaving a tombstone, so removals never grow the
// table: its size depends only on the most buckets it has held at once,
// and growth stops at maxSlots, which the store sizes for its bound. So
// however many keys come and go, a table never costs more than maxSlots ×
// slotBytes (a Go map, whose tables never shrink and whose deletions leave
// tombstones that it prunes only sometimes, grew without bound under such
// churn).
type table struct {
	keys     []digest
	vals     []bucket
	n        int
	maxSlots int // growth stops here unless the load requires more
	hand     int // where the next scan for room starts
}

func newTable(maxSlots int) table { return table{maxSlots: maxSlots} }

// slotsFor returns the slots a table of at most n buckets needs.
func slotsFor(n int) int { return (n*loadDen + loadNum - 1) / loadNum }

// home returns dg's first slot: the top bits of dg[1] scaled to the table
// (dg[0] chose the shard).
func (tb *table) home(dg digest) int {
	hi, _ := bits.Mul64(dg[1], uint64(len(tb.keys)))
	return int(hi)
}

func (tb *table) next(i int) int {
	if i++; i == len(tb.keys) {
		return 0
	}
	return i
}

// find returns dg's slot, or -1.
func (tb *table) find(dg digest) int {
	if tb.n == 0 {
		return -1
	}
	for i := tb.home(dg); ; i = tb.next(i) {
		switch tb.keys[i] {
		case dg:
			return i
		case digest{}:
			return -1
		}
	}
}

// insert adds dg, which must be absent, growing the table if its load
// requires.
func (tb *table) insert(dg digest, b bucket) {
	if (tb.n+1)*loadDen > len(tb.keys)*loadNum {
		size := max(minSlots, 2*len(tb.keys))
		if len(tb.keys) < tb.maxSlots {
			size = min(size, tb.maxSlots)
		}
		tb.resize(max(size, slotsFor(tb.n+1)))
	}
	i := tb.home(dg)
	for tb.keys[i] != (digest{}) {
		i = tb.next(i)
	}
	tb.keys[i], tb.vals[i] = dg, b
	tb.n++
}

func (tb *table) resize(size int) {
	keys, vals := tb.keys, tb.vals
	tb.keys, tb.vals, tb.n, tb.hand = make([]digest, size), make([]bucket, size), 0, 0
	for i, k := range keys {
		if k != (digest{}) {
			tb.insert(k, vals[i])
		}
	}
}

// remove empties slot i and shifts back the entries after it that may
// move, so that every entry stays reachable from its home.
func (tb *table) remove(i int) {
	for j := tb.next(i); tb.keys[j] != (digest{}); j = tb.next(j) {
		// The entry at j may move to i unless its home lies cyclically in
		// (i, j].
		h := tb.home(tb.keys[j])
		if i <= j && i < h && h <= j || i > j && (i < h || h <= j) {
			continue
		}
		tb.keys[i], tb.vals[i] = tb.keys[j], tb.vals[j]
		i = j
	}
	tb.keys[i], tb.vals[i] = digest{}, bucket{}
	tb.n--
}
