// Package memo implements a bounded memo of a pure function: a
// direct-mapped table of Size slots, each an immutable (key, value) pair
// behind an atomic pointer. A key whose slot holds another key is computed
// again and replaces it. Whatever keys the callers bring (client-chosen
// limit overrides, say), the memo holds at most Size pairs.
package memo

import (
	"hash/maphash"
	"sync/atomic"
)

// Size is the number of slots.
const Size = 256

// Memo remembers f's results. It is safe for concurrent use; build one with
// New. It must not be copied after first use.
type Memo[K comparable, V any] struct {
	f     func(K) (V, error)
	seed  maphash.Seed
	slots [Size]atomic.Pointer[entry[K, V]]
}

type entry[K comparable, V any] struct {
	k K
	v V
}

// New returns an empty memo of f, which must be pure: a slot may be
// computed by several callers at once, and the last one's result stays.
func New[K comparable, V any](f func(K) (V, error)) *Memo[K, V] {
	return &Memo[K, V]{f: f, seed: maphash.MakeSeed()}
}

// Get returns f(k), from the memo when k's slot holds it. An error is
// returned and not remembered.
func (m *Memo[K, V]) Get(k K) (V, error) {
	slot := &m.slots[maphash.Comparable(m.seed, k)%Size]
	if e := slot.Load(); e != nil && e.k == k {
		return e.v, nil
	}
	v, err := m.f(k)
	if err != nil {
		return v, err
	}
	slot.Store(&entry[K, V]{k, v})
	return v, nil
}
