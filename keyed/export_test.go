package keyed

import "sync/atomic"

// ShardOf returns the index of key's shard.
func (l *Limiter) ShardOf(key string) int { return l.shardOf(key) }

// Held reports whether key holds a bucket now.
func (l *Limiter) Held(key string) bool {
	var buf [digestBytes]byte
	key = l.form(key, &buf)
	h := l.hash(key)
	s := &l.shards[l.shardIndex(h)]
	s.mu.Lock()
	defer s.mu.Unlock()
	tb := s.tab.Load()
	return tb != nil && tb.find(l.hx(h), tagOf(h), key) != nil
}

// Counter reports whether the limiter reads the system clock through the
// timestamp counter.
func (l *Limiter) Counter() bool { return l.clk.Counter() }

// LockKey locks key's multi-limit entry as a call on it does, and returns
// the unlock; key must be held as one.
func (l *Limiter) LockKey(key string) func() {
	var buf [digestBytes]byte
	key = l.form(key, &buf)
	h := l.hash(key)
	s := &l.shards[l.shardIndex(h)]
	s.mu.Lock()
	e := s.tab.Load().find(l.hx(h), tagOf(h), key)
	s.mu.Unlock()
	m := asMulti(e)
	m.mu.Lock()
	return m.mu.Unlock
}

// MaxBytesPerKey is the most heap bytes a held single-limit key costs, its
// share of the table included.
const MaxBytesPerKey = maxBytesPerKey

// TagTwins returns how many other keys' entries a lookup of key passes
// whose tag equals key's: the slots of its probe run, from its home to its
// own entry, that hold another entry with the same tag. key must be held.
func (l *Limiter) TagTwins(key string) int {
	var buf [digestBytes]byte
	key = l.form(key, &buf)
	h := l.hash(key)
	s := &l.shards[l.shardIndex(h)]
	s.mu.Lock()
	defer s.mu.Unlock()
	tb := s.tab.Load()
	twins := 0
	for i := home(l.hx(h), tb.n); ; i = next(i, tb.n) {
		e := tb.slots[i].Load()
		if e.key == key {
			return twins
		}
		if tb.tag(i) == tagOf(h) {
			twins++
		}
	}
}

// CountCollisions makes every probe count the entries it dereferences that
// are not its key's, until stop is called.
func CountCollisions() (n *atomic.Int64, stop func()) {
	n = new(atomic.Int64)
	f := func() { n.Add(1) }
	onCollision.Store(&f)
	return n, func() { onCollision.Store(nil) }
}
