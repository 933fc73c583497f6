package keyed

// ShardOf returns the index of key's shard.
func (l *Limiter) ShardOf(key string) int { return l.shardOf(key) }

// Held reports whether key holds a bucket now.
func (l *Limiter) Held(key string) bool {
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
