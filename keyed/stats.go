package keyed

// Stats is a snapshot of a Limiter's key table and of the events that
// changed it since New.
type Stats struct {
	Keys    int // keys held now, as Len reports
	MaxKeys int // the bound (WithMaxKeys)
	Shards  int // the number of shards the keys are spread over

	Inserts   uint64 // buckets created: a key first seen, or seen again after it was dropped or evicted
	Drops     uint64 // full buckets forgotten (exact: a full bucket equals a new one)
	Evictions uint64 // live buckets forgotten to make room (EvictLRU); each such client restarts full
	Refusals  uint64 // new keys refused for want of room (RefuseNew)
}

// Stats returns the limiter's counters. Each shard's counters are read
// under its lock, so they are consistent with each other; the limiter as a
// whole is not stopped while they are summed, and Keys is read first.
func (l *Limiter) Stats() Stats {
	st := Stats{MaxKeys: l.maxKeys, Shards: len(l.shards), Keys: l.Len()}
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		st.Inserts += s.inserts
		st.Drops += s.drops
		st.Evictions += s.evictions
		st.Refusals += s.refusals
		s.mu.Unlock()
	}
	return st
}
