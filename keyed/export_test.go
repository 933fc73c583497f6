package keyed

// ShardOf returns the index of key's shard.
func (l *Limiter) ShardOf(key string) int { return l.shardOf(key) }

// Held reports whether key holds a bucket now.
func (l *Limiter) Held(key string) bool {
	var buf [digestBytes]byte
	key = l.form(key, &buf)
	h := l.hash(key)
	s := &l.shards[h>>l.shift]
	s.mu.Lock()
	defer s.mu.Unlock()
	tb := s.tab.Load()
	return tb != nil && tb.find(h, key) != nil
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
	s := &l.shards[h>>l.shift]
	s.mu.Lock()
	e := s.tab.Load().find(h, key)
	s.mu.Unlock()
	m := asMulti(e)
	m.mu.Lock()
	return m.mu.Unlock
}

// MaxBytesPerKey is the most heap bytes a held single-limit key costs, its
// share of the table included.
const MaxBytesPerKey = maxBytesPerKey
