package keyed

// ShardOf returns the index of key's shard.
func (l *Limiter) ShardOf(key string) int { return l.shardOf(key) }

// Held reports whether key holds a bucket now.
func (l *Limiter) Held(key string) bool {
	h := l.hash(key)
	s := &l.shards[h>>l.shift]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index.find(uint32(h), key, s.ents) != nilSlot
}

// ShardLens returns the keys held by each shard and each shard's share of
// the bound.
func (l *Limiter) ShardLens() (held, share []int) {
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		held, share = append(held, s.n), append(share, s.max)
		s.mu.Unlock()
	}
	return held, share
}
