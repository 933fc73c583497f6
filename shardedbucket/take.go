package shardedbucket

import "slices"

// take consumes need units if they are there and reports whether it did.
func (b *Bucket) take(need int64) bool { return b.takeAt(need, b.p.V(b.clk.Now()), home()) }

// takeAt is take at stream value v, starting from shard start.
func (b *Bucket) takeAt(need, v int64, start uint) bool {
	h := &b.shards[start&b.mask]
	for {
		// state, written out so that a frozen shard costs one compare
		// rather than its stream: while the bucket is dry, every call
		// comes this way.
		z := h.z.Load()
		if z == frozen {
			if v < h.aside.Load() {
				return false // standing aside: see central.go
			}
			break
		}
		vi := b.g.vi(h, v)
		base := max(z, vi-h.cap)
		if vi-base < need {
			break
		}
		if h.z.CompareAndSwap(z, base+need) {
			return true
		}
	}
	if c := b.c.Load(); c != spread {
		return b.takeCentral(need, v, c, start) // the bucket is dry: see central.go
	}
	if b.mask == 0 {
		return false // the one shard is the whole bucket
	}
	return b.gather(need, v, start)
}

// putBack undoes a lost gather's takes: take[j] units from shard start+j,
// whose z it moved from olds[j] to news[j]. It puts units back only into a
// shard nobody has touched since (a put-back after someone else's take
// could resurrect refill that their take's clamp discarded), and only if no
// reservation was committed since: a reservation made while these units
// were out did not count
// them, so putting them back would let a later TryAcquire take them while
// that waiter sleeps; and a reservation is made only after a collapse. So it
// gives back only if the bucket has not changed representation since the
// gather read g0 (Bucket.epoch), before its first take; otherwise they are
// forfeited. It takes resvMu, so that no
// reservation is planned while it decides; TryAcquire takes it only here,
// after a lost race. So neither putBack nor the take path that calls it
// (takeAt, gather) may run with resvMu held: the mutex is not reentrant,
// so the goroutine would wait on itself, and every later caller that needs
// resvMu would wait behind it (see reserve).
func (b *Bucket) putBack(start uint, take, olds, news []int64, g0 int64) {
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	if b.epoch.Load() != g0 {
		return
	}
	for j, t := range take {
		if t > 0 {
			b.shards[(start+uint(j))&b.mask].z.CompareAndSwap(news[j], olds[j])
		}
	}
}

// testHookGather, set by tests only, runs in gather between planning the
// takes and making them, with the stream value, the start shard and the
// planned takes (indexed from start): a test takes units there, as a
// concurrent caller would, to make the gather lose its race on demand. It
// costs gather one load of a word that is never written outside tests. The
// hook gets a copy of the plan, so that the plan's buffer stays on gather's
// stack.
var testHookGather func(b *Bucket, v int64, start uint, take []int64)

// gather is the slow path: the home shard is short. It sums what every
// shard holds with loads only, so a rejection writes nothing.
func (b *Bucket) gather(need, v int64, start uint) bool {
	sum, most, fullest := b.survey(v)
	// One shard holds enough: take from it alone, one line written instead
	// of several. In a dry bucket that is the shard the last whole token
	// was dealt to; in a fuller one the fullest is the one most likely to
	// discard refill at its cap, so this levels too.
	if most >= need {
		s := &b.shards[fullest]
		for {
			bal, z, base := s.state(v, &b.g)
			if bal < need {
				break
			}
			if s.z.CompareAndSwap(z, base+need) {
				return true
			}
		}
	}
	if sum < need {
		// Less than a token in all the shards: the bucket is dry, and
		// collapses into the central word (central.go), so that the calls
		// after this one touch one shared line, not every shard. The
		// collapse sums the shards at a later reading than v, so this
		// caller then tries the central word, at its own reading.
		if sum < b.p.Units(1) {
			b.tryCollapse()
			if c := b.c.Load(); c != spread {
				return b.takeCentral(need, v, c, start)
			}
		}
		return false
	}
	// Near the caps, levelling the takes keeps any shard from sitting full
	// and discarding refill. Below half of them it matters not, and taking
	// from as few shards as possible writes fewer lines and gathers up the
	// fractions a drained bucket leaves behind: levelling them instead left
	// every shard of a nearly dry bucket holding a fraction, so that every
	// later admission wrote all of them (2.7x slower with 8 shards).
	nearCaps := 2*most >= b.shards[fullest].cap
	// Balances, planned takes, and each taken shard's z before and after.
	// They live on the stack for up to 64 shards; more shards cost an
	// allocation on this path.
	var balBuf, takeBuf, oldBuf, newBuf [64]int64
	bal, take := b.scratch(balBuf[:]), b.scratch(takeBuf[:])
	olds, news := b.scratch(oldBuf[:]), b.scratch(newBuf[:])
	sum = b.balances(v, start, bal)
	if sum < need {
		return false
	}
	if nearCaps {
		level(bal, take, sum-need, b.soonest(v, start))
	} else {
		fewest(bal, take, need)
	}
	g0 := b.epoch.Load() // before the first take; see putBack
	if testHookGather != nil {
		// A copy: passed to a function value, take itself would escape,
		// and every gather would allocate its plan.
		testHookGather(b, v, start, slices.Clone(take))
	}
	for i, t := range take {
		if t == 0 {
			continue
		}
		s := &b.shards[(start+uint(i))&b.mask]
		for {
			have, z, base := s.state(v, &b.g)
			if have < t {
				// A concurrent caller took these units first.
				b.putBack(start, take[:i], olds, news, g0)
				return false
			}
			if s.z.CompareAndSwap(z, base+t) {
				olds[i], news[i] = z, base+t
				break
			}
		}
	}
	return true
}

// scratch returns buf cut to the shard count, or a new slice if there are
// more than 64 shards.
func (b *Bucket) scratch(buf []int64) []int64 {
	if n := len(b.shards); n <= len(buf) {
		return buf[:n]
	}
	return make([]int64, len(b.shards))
}

// balances fills bal with every shard's balance, indexed from start, and
// returns their sum. Balances below zero (a stale reading, or a frozen
// shard) count as zero.
func (b *Bucket) balances(v int64, start uint, bal []int64) int64 {
	var sum int64
	for i := range bal {
		bal[i], _, _ = b.shards[(start+uint(i))&b.mask].state(v, &b.g)
		bal[i] = max(bal[i], 0)
		sum += bal[i]
	}
	return sum
}

// fewest fills take so that taking take[i] from bal[i] takes need units in
// total from as few shards as possible: everything from the fullest, then
// from the next fullest, until the last one chosen gives the rest. It
// requires need <= the sum of the positive balances.
func fewest(bal, take []int64, need int64) {
	for need > 0 {
		j := -1
		for i, b := range bal {
			if take[i] == 0 && b > 0 && (j < 0 || b > bal[j]) {
				j = i
			}
		}
		take[j] = min(bal[j], need)
		need -= take[j]
	}
}

// level fills take so that taking take[i] from bal[i] leaves keep units in
// total, as evenly as possible: every shard keeps min(bal[i], L) or one unit
// less, for the lowest water level L that keeps enough. The shards that keep
// one less are the first in the order at gives, the ones refilled soonest.
// gather uses it with balances and keep at or above zero; it is correct for
// negative ones too. It requires keep <= sum(bal).
func level(bal, take []int64, keep int64, at func(rank int) int) {
	kept := func(l int64) (sum int64) {
		for _, b := range bal {
			sum += min(b, l)
		}
		return sum
	}
	n := int64(len(bal))
	// kept(lo) < keep <= kept(hi): below every balance, kept is n·lo.
	lo := min(slices.Min(bal), keep/n-1) - 1
	hi := slices.Max(bal)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if kept(mid) >= keep {
			hi = mid
		} else {
			lo = mid
		}
	}
	for i, b := range bal {
		take[i] = b - min(b, hi)
	}
	// kept(hi) - kept(hi-1) counts the shards at or above hi, so fewer
	// than that many keep one unit less.
	over := kept(hi) - keep
	for rank := 0; over > 0; rank++ {
		if i := at(rank); bal[i] >= hi {
			take[i]++
			over--
		}
	}
}

// survey reads every shard at stream value v, loads only: what they hold
// above zero in all, and the largest balance and its shard (-1 if none is
// above zero).
func (b *Bucket) survey(v int64) (sum, most int64, fullest int) {
	fullest = -1
	for i := range b.shards {
		bal, _, _ := b.shards[i].state(v, &b.g)
		sum += max(bal, 0)
		if bal > most {
			most, fullest = bal, i
		}
	}
	return sum, most, fullest
}
