package keyed

import (
	"sync/atomic"
	"unsafe"
)

// entry is one held key: 32 bytes. Entries are allocated once per
// insertion and never reused, so a pointer to one names one insertion of
// one key (no ABA): a reader that loaded it before it was removed can only
// find it dead, never find it standing for another key.
type entry struct {
	key string        // immutable after publication
	st  atomic.Uint64 // the bucket: z + zOff, or dead, moved or multiTag
	at  atomic.Uint64 // the latest elapsed time a peek applied to the bucket, | refBit
}

// The state word st holds z + zOff, where z is the key's empty point on the
// refill stream (balance at elapsed time t is min(Cap, V(t) − z)); z lies
// in (−Cap, V(Horizon)] ⊂ (−2^61, 2^62], so z + zOff lies in
// (0, 2^62 + 2^61], below 2^63.
//
// Three values above every encoded state mark an entry that no call may
// decide on through st: dead (removed from its shard's table; never
// revives), moved (replaced in the table by a multiEntry that holds its
// state; never revives either) and multiTag (the entry is a multiEntry,
// whose limits live under its lock; see multi.go). A CAS that succeeds on
// a state below multiTag therefore happened before the entry was removed
// or replaced, and was seen by the removal or the replacement.
//
// The time word at holds the latest elapsed time (at most Horizon < 2^62)
// a peek (n == 0) applied to the bucket, or the time of the insertion, and
// in bit 63 the CLOCK reference bit: clear in a new entry, set by every
// later call, cleared by the eviction hand. The package doc ("Time") says why other calls need not
// store their time.
const (
	zOff     = int64(1) << 61
	dead     = ^uint64(0)
	moved    = ^uint64(0) - 1
	multiTag = ^uint64(0) - 2
	refBit   = uint64(1) << 63
)

// enc returns the state word for empty point z.
func enc(z int64) uint64 { return uint64(z + zOff) }

// dec returns the empty point a state word below multiTag holds.
func dec(s uint64) int64 { return int64(s) - zOff }

// newEntry returns an entry for a copy of key with empty point z, created
// at t. The copy is made so that the limiter does not keep alive a larger
// buffer the caller's string may point into (a request header, say); key
// (a key's form: at most maxKeyBytes) is stored in the entry's own
// allocation, next to its state, so that a lookup touches one object.
func newEntry(key string, z, t int64) *entry {
	e := withKey(key, func(e *entry) *string { return &e.key })
	e.st.Store(enc(z))
	e.at.Store(uint64(t)) // no reference bit: a key earns its second chance by a second call
	return e
}

// withKey returns a new T whose string field (field) is a copy of key (a
// key's form: at most maxKeyBytes), stored in the same allocation as the T.
func withKey[T any](key string, field func(*T) *string) *T {
	switch n := len(key); {
	case n == 0:
		return new(T)
	case n <= 16:
		return inline[T, [16]byte](key, field)
	case n <= 32:
		return inline[T, [32]byte](key, field)
	case n <= 48:
		return inline[T, [48]byte](key, field)
	case n <= maxKeyBytes:
		return inline[T, [maxKeyBytes]byte](key, field)
	}
	panic("keyed: a key's form is longer than maxKeyBytes")
}

// inline returns a T allocated together with a buffer of type K (a byte
// array at least len(key) long, len(key) > 0) holding a copy of key, which
// field of the T points to.
func inline[T, K any](key string, field func(*T) *string) *T {
	b := new(struct {
		v T
		k K
	})
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&b.k)), unsafe.Sizeof(b.k))
	*field(&b.v) = unsafe.String(&buf[0], copy(buf, key))
	return &b.v
}

// last returns the latest elapsed time stored in e's time word.
func (e *entry) last() int64 { return int64(e.at.Load() &^ refBit) }

// touch records that a call applied elapsed time t to e, with the reference
// bit. The time only moves forward: a CAS that loses to a later time gives
// up, one that loses to the hand clearing the bit tries again.
func (e *entry) touch(a uint64, t int64) {
	for {
		if int64(a&^refBit) > t || (int64(a&^refBit) == t && a&refBit != 0) {
			return
		}
		if e.at.CompareAndSwap(a, uint64(t)|refBit) {
			return
		}
		a = e.at.Load()
	}
}

// sameShort reports whether a == b for keys of one length in [8, 16]: two
// 8-byte loads a side, their first and their last eight bytes. decide
// compares a key of such a length so instead of with ==, which calls the
// runtime's memequal (a call, and a dispatch on the length), a fifth of a
// held key's call.
func sameShort(a, b string) bool {
	o := len(a) - 8
	pa, pb := unsafe.StringData(a), unsafe.StringData(b)
	return word(pa, 0) == word(pb, 0) && word(pa, o) == word(pb, o)
}
