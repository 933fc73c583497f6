package keyed

import (
	"math/rand/v2"
	"sync/atomic"
)

// ShardOf returns the index of key's shard.
func (l *Limiter) ShardOf(key string) int { return l.shardOf(key) }

// locked calls f with key's form, its hash and its shard's table (nil
// before the shard's first key) under the shard's lock.
func (l *Limiter) locked(key string, f func(form string, h uint64, tb *table)) {
	var buf [digestBytes]byte
	key = l.form(key, &buf)
	h := l.hash(key)
	s := &l.shards[l.shardIndex(h)]
	s.mu.Lock()
	defer s.mu.Unlock()
	f(key, h, s.tab.Load())
}

// Held reports whether key holds a bucket now.
func (l *Limiter) Held(key string) (held bool) {
	l.locked(key, func(form string, h uint64, tb *table) {
		held = tb != nil && tb.find(l.hx(h), tagOf(h), form, nil) != nil
	})
	return held
}

// Counter reports whether the limiter reads the system clock through the
// timestamp counter.
func (l *Limiter) Counter() bool { return l.clk.Counter() }

// multi returns key's multi-limit entry, found under its shard's lock and
// returned after it is released (the lock order: no key's lock is held
// while a shard's is waited for); key must be held as one.
func (l *Limiter) multi(key string) (m *multiEntry) {
	l.locked(key, func(form string, h uint64, tb *table) {
		m = asMulti(tb.find(l.hx(h), tagOf(h), form, nil))
	})
	return m
}

// LockKey locks key's multi-limit entry as a call on it does, and returns
// the unlock; key must be held as one.
func (l *Limiter) LockKey(key string) func() {
	m := l.multi(key)
	m.mu.Lock()
	return m.mu.Unlock
}

// MaxBytesPerKey is the most heap bytes a held single-limit key costs, its
// share of the table included.
const MaxBytesPerKey = maxBytesPerKey

// MaxBytesPerShard is the most heap bytes a shard costs besides its keys.
const MaxBytesPerShard = maxBytesPerShard

// TagTwins returns how many other keys' entries a lookup of key passes
// whose tag equals key's: the slots of its probe run, from its home to its
// own entry, that hold another entry with the same tag. key must be held.
func (l *Limiter) TagTwins(key string) (twins int) {
	l.locked(key, func(form string, h uint64, tb *table) {
		for i := home(l.hx(h), tb.n); tb.slots[i].Load().key != form; i = next(i, tb.n) {
			if tb.tag(i) == tagOf(h) {
				twins++
			}
		}
	})
	return twins
}

// CountCollisions makes every probe of l count the entries it dereferences
// that are not its key's, from now on, and returns the count. Call it
// before the calls it counts, from the goroutine that makes them (or one
// that starts them).
func (l *Limiter) CountCollisions() *atomic.Int64 { return &l.hooks().collisions }

// hooks returns l's test hooks, made on first use.
func (l *Limiter) hooks() *hooks {
	if l.test == nil {
		l.test = new(hooks)
	}
	return l.test
}

// OnKeyBusy makes every sweep of l that finds a multi-limit key's lock held
// call f just before it waits for the lock. Call it before the calls it
// watches.
func (l *Limiter) OnKeyBusy(f func()) { l.hooks().busy = f }

// Names returns the limit Names key holds, in order; key must be held as
// a multi-limit entry.
func (l *Limiter) Names(key string) []string {
	m := l.multi(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, len(m.lims))
	for i := range m.lims {
		names[i] = m.lims[i].name
	}
	return names
}

// MaxBytesPerMultiKey is the most heap bytes a held multi-limit key costs,
// its share of the table aside.
const MaxBytesPerMultiKey = maxBytesPerMultiKey

// MaxBytesParamsCache is the most heap bytes the limiter's cache of limits
// holds besides what keys hold.
const MaxBytesParamsCache = maxBytesParamsCache

// IsMulti reports whether key is held now as a multi-limit entry.
func (l *Limiter) IsMulti(key string) (multi bool) {
	l.locked(key, func(form string, h uint64, tb *table) {
		if tb == nil {
			return
		}
		e := tb.find(l.hx(h), tagOf(h), form, nil)
		multi = e != nil && e.st.Load() == multiTag
	})
	return multi
}

// FixHash replaces the secrets that hash keys of up to 16 bytes with ones
// drawn from seed, so that a walk over such keys lays them out the same way
// on every run and replays from its seed. Call it before first use.
func (l *Limiter) FixHash(seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	for i := range l.hasher.k {
		l.hasher.k[i] = r.Uint64()
	}
}
