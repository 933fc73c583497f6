package keyed

import "math"

// reserve takes one place in the key bound for an insertion, if one is
// free. The count is one word written by insertions and removals only,
// never by a call on a held key.
func (l *Limiter) reserve() bool {
	for {
		n := l.keys.Load()
		if n >= int64(l.maxKeys) {
			return false
		}
		if l.keys.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// makeRoom runs when a new key finds the limiter holding maxKeys keys. It
// holds no shard lock on entry and takes one at a time (so there is no lock
// order to keep). In order:
//
//  1. Full buckets go first. Every shard whose floor is at most t may hold
//     one (and none other can: floor bounds each held bucket's full-at time
//     from below), so those shards are swept, own shard first, until a
//     sweep drops one. A dropped bucket is exact, so no client notices.
//  2. Only if no bucket anywhere is full at t: under EvictLRU the CLOCK hand
//     of the own shard (or, if it holds none, of the next shard that holds
//     one) evicts a live key, and makeRoom reports true;
//  3. under RefuseNew it reports false and the elapsed time at which the
//     first held bucket is full: the least floor, every one of which is now
//     above t, once it is exact (see below).
//
// A true result means room was made, not kept: a concurrent insertion may
// take it, and the caller tries again.
func (l *Limiter) makeRoom(first int, t int64) (int64, bool) {
	n := len(l.shards)
	for k := range n {
		s := &l.shards[(first+k)%n]
		if s.floor.Load() > t {
			continue
		}
		s.mu.Lock()
		dropped := s.sweep(l, t)
		s.mu.Unlock()
		if dropped > 0 {
			return 0, true
		}
	}
	if l.keys.Load() < int64(l.maxKeys) {
		return 0, true // a removal elsewhere made room meanwhile
	}
	if !l.refuse {
		for k := range n {
			s := &l.shards[(first+k)%n]
			s.mu.Lock()
			ok := s.evict(l, t)
			s.mu.Unlock()
			if ok {
				return 0, true
			}
		}
		return 0, true // nothing to evict: the keys counted are insertions in progress
	}
	// The least floor is the first full-at time once it is exact: each
	// floor bounds its shard's from below, so an exact least floor is the
	// least of all. A shard whose floor is not exact (its bucket was taken
	// from, or removed, since) is swept, which makes it exact; at most one
	// sweep per shard, and none while the floors stay exact.
	at := int64(math.MaxInt64)
	for range n + 1 {
		i := -1
		at = math.MaxInt64
		for j := range l.shards {
			if f := l.shards[j].floor.Load(); f < at {
				at, i = f, j
			}
		}
		if i < 0 {
			return 0, true // no key held: the keys counted are insertions in progress
		}
		s := &l.shards[i]
		s.mu.Lock()
		if s.floor.Load() != at {
			s.mu.Unlock()
			continue
		}
		if at > t && s.exact(l) {
			s.mu.Unlock()
			return at, false
		}
		// A floor not exact, or one at or before t (a bucket inserted by
		// a call with an older reading since the sweeps above may be full
		// at t already): sweep.
		dropped := s.sweep(l, t)
		s.mu.Unlock()
		if dropped > 0 {
			return 0, true
		}
	}
	if at <= t {
		return 0, true // the floors kept moving; look again rather than refuse with no wait
	}
	return at, false // the floors kept moving: a lower bound
}
