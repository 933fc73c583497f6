package shardedbucket

// reserve is the blocking step; see refill.Reserve. It first takes like
// TryAcquire, without any lock. If that fails, the request must wait: under
// resvMu it collapses the bucket into the central word if it is spread
// (central.go), and reserves there exactly as gcra does on its one word
// (refill.ReserveWord): it moves c past the units it needs (the balance goes
// below zero) and sleeps until the stream reaches them. A waiter therefore wakes exactly
// when one bucket's would, whatever the shard count, and no TryAcquire
// overtakes it (the central balance stays below zero until it wakes, and
// the shards stay frozen: a spread needs a balance of spreadAt).
//
// The take before the lock is takeAt, which may gather and, losing a race,
// lock resvMu to put back (see putBack); so takeAt never runs with resvMu
// held, and under it reserve only loads and swaps words, reads the clock
// and allocates the undo.
func (b *Bucket) reserve(need, limit int64) (int64, int64, func() bool) {
	return b.reserveAt(need, limit, home())
}

// reserveAt is reserve from home shard hm, which it tells leftBy about its
// own moves of c (see central.go's "Standing aside"), the undo's included.
func (b *Bucket) reserveAt(need, limit int64, hm uint) (int64, int64, func() bool) {
	now := b.clk.Now()
	if b.takeAt(need, b.p.V(now), hm) {
		return 0, now, nil
	}
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	if b.c.Load() == spread {
		now = b.collapse()
	} else {
		now = b.clk.Now()
	}
	// With resvMu held, c stays an empty point: only a spread, which needs
	// resvMu, turns it back.
	wait, z, end := b.p.ReserveWord(&b.c, &b.debtUntil, now, need, limit)
	b.leftBy(hm, b.p.V(now))
	if wait <= 0 || wait > limit {
		return wait, now, nil
	}
	epoch := b.epoch.Load()
	return wait, now, func() bool { return b.undo(z, end, epoch, hm) }
}

// undo gives up a reservation that moved c from z to end while the bucket's
// epoch was epoch, made from home shard hm, and reports whether it was
// still waiting (see refill.Reserve).
//
// The tail rule (internal/refill's reservation notes): c still holds
// exactly end only if nothing was admitted or reserved after it, and then
// swapping it back to z hands the units on exactly; otherwise they are
// forfeited. It holds resvMu, so no step runs meanwhile, and checks the
// epoch, so that c holding end again after a spread and a collapse (a
// value that has come round) cannot pass for the reservation's own. On a
// clock that does not run backwards the epoch cannot have moved before the
// wake: a spread needs the central balance at spreadAt, which the stream
// reaches only after every reservation's end.
func (b *Bucket) undo(z, end, epoch int64, hm uint) bool {
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	v := b.p.V(b.clk.Now())
	if v >= end {
		return false // due: the tokens are the caller's
	}
	if b.epoch.Load() == epoch && b.c.CompareAndSwap(end, z) {
		b.leftBy(hm, v)
	}
	return true
}
