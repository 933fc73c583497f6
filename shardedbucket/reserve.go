package shardedbucket

import (
	"slices"

	"github.com/admit-go/admit/internal/refill"
)

// reserve is the blocking step; see refill.Reserve. When the shards hold too
// little, it schedules the request onto the refill stream itself: it finds
// the least stream value w by which the shards, each drained to zero and
// refilled from there, could have produced need units in all (see
// schedule), and moves every shard that contributes to exactly its own
// stream's value at w. The reservation is then an admission at w on every
// shard it touches, like a single bucket's (see internal/refill's
// reservation notes): its units on shard i are the last ones before V_i(w),
// never more than cap_i of them, so each shard's bound holds on its own. A
// shard that would contribute more than its capacity gives only cap_i and
// discards the rest, as a full shard discards its refill.
//
// The plan is committed only as a whole: it swaps each shard's z from the
// value it planned on, and if a concurrent TryAcquire moved one first, the
// shards already swapped are put back and it plans again.
//
// Only planning and committing hold resvMu (see plan). Taking what the
// shards hold is takeAt, as in TryAcquire, and runs without it: a gather
// that loses its race puts its takes back under resvMu. (reserve once
// called takeAt under resvMu when the plan found enough: a lost race there
// waited forever for the mutex its own goroutine held, and so did every
// later reservation and put-back: the whole bucket hung.)
func (b *Bucket) reserve(need, limit int64) (int64, func() bool) {
	now := b.clk.Now()
	start := home()
	if b.takeAt(need, b.p.V(now), start) {
		return 0, nil
	}
	for ; ; now = b.clk.Now() {
		wait, undo, enough, ok := b.plan(need, limit, now)
		if ok {
			return wait, undo
		}
		// The shards held need units at the reading enough (a gather lost
		// a race, or units came back): take them like TryAcquire at that
		// reading, or look again. At one reading takeAt fails where plan
		// found enough only if a concurrent caller moved a shard between.
		if b.takeAt(need, b.p.V(enough), start) {
			return 0, nil
		}
	}
}

// plan is reserve's step under resvMu, which it takes: it schedules need
// units on the stream from the reading now (or a later one, if a commit
// loses a race), commits the reservation, and returns reserve's results
// with ok true. If the shards hold need units at the reading it plans from
// (w == v), it takes nothing and returns that reading as enough, with ok
// false, for reserve to take them outside the lock. It must not be called
// with resvMu held, and it never calls takeAt (see the package doc's lock
// order).
func (b *Bucket) plan(need, limit, now int64) (wait int64, undo func() bool, enough int64, ok bool) {
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	var balBuf, zBuf, toBuf [64]int64
	bal, zs, to := b.scratch(balBuf[:]), b.scratch(zBuf[:]), b.scratch(toBuf[:])
	vmax := b.p.V(refill.Horizon)
	for ; ; now = b.clk.Now() {
		v := b.p.V(now)
		for i := range b.shards {
			bal[i], zs[i], _ = b.shards[i].state(v, &b.g)
		}
		w, can := b.schedule(v, vmax, bal, need)
		if !can {
			return refill.Never, nil, 0, true
		}
		if w == v {
			return 0, nil, now, false
		}
		wake := b.p.When(now, w)
		if wake > refill.Horizon {
			return refill.Never, nil, 0, true
		}
		if wake-now > limit {
			return wake - now, nil, 0, true
		}
		r := &reservation{b: b, wake: wake, old: slices.Clone(zs), z: slices.Clone(zs)}
		for i := range b.shards {
			s := &b.shards[i]
			if wi := b.g.vi(s, w); bal[i]+wi-b.g.vi(s, v) > 0 {
				to[i] = wi
			} else {
				to[i] = zs[i] // deeper in debt than w covers: untouched
			}
		}
		if !r.commit(to) {
			continue
		}
		b.resvGen.Add(1)
		r.prev = b.resvSeq
		b.resvSeq++
		r.seq = b.resvSeq
		for until := b.debtUntil.Load(); until < r.wake && !b.debtUntil.CompareAndSwap(until, r.wake); {
			until = b.debtUntil.Load()
		}
		return r.wake - now, r.undo, 0, true
	}
}

// schedule returns the least stream value w >= v at which the shards, with
// balances bal at v, could have supplied need units, each shard i at most
// min(cap_i, bal[i] + V_i(w) − V_i(v)) of them; false if not even at vmax.
// The supply grows by at most one unit per unit of w (each unit of the
// stream goes to one shard), so at w it is exactly need, unless w == v: then
// the shards already hold need units or more.
func (b *Bucket) schedule(v, vmax int64, bal []int64, need int64) (int64, bool) {
	supply := func(w int64) (sum int64) {
		for i := range b.shards {
			s := &b.shards[i]
			sum += min(s.cap, max(0, bal[i]+b.g.vi(s, w)-b.g.vi(s, v)))
		}
		return sum
	}
	if supply(v) >= need {
		return v, true
	}
	if supply(vmax) < need {
		return 0, false
	}
	lo, hi := v, vmax // supply(lo) < need <= supply(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if supply(mid) >= need {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}

// reservation is what a blocked AcquireN took, for its undo.
type reservation struct {
	b         *Bucket
	old, z    []int64 // each shard's z before and after; equal where untouched
	wake      int64   // elapsed time at which the reservation is admitted
	seq, prev int64   // its number in Bucket.resvSeq, and the one before it
}

// commit swaps every shard from r.old[i] to to[i], all or nothing: if a
// concurrent caller moved a shard first, it swaps back the ones already
// swapped and reports false. It requires b.resvMu held.
func (r *reservation) commit(to []int64) bool {
	b := r.b
	for i := range b.shards {
		if to[i] == r.old[i] {
			continue
		}
		if !b.shards[i].z.CompareAndSwap(r.old[i], to[i]) {
			r.giveBack()
			return false
		}
		r.z[i] = to[i]
	}
	return true
}

// undo gives up the reservation if its wake time has not come, and reports
// whether it did (see refill.Reserve).
//
// The tail rule, bucket-wide. The units go back only if no reservation has
// been made anywhere in the bucket since this one: a later reservation was
// scheduled on the stream after this one's, and giving this one's units
// back would let callers take them again while the later one still wakes
// at its fixed time. Then, per shard, a shard whose z is still the one this
// reservation left behind has had nothing taken since, and swapping z back
// hands the units on exactly; a shard whose z has moved keeps its units
// forfeited. The swap compares against the z it decided on, so a stale
// clock reading, or a pause between the reading and the swap, cannot
// resurrect units a later take consumed. Once every shard is restored, the
// bucket is as it was before this reservation, so the one before it is the
// newest again and may give its units back in turn.
func (r *reservation) undo() bool {
	b := r.b
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	if b.clk.Now() >= r.wake {
		return false
	}
	if b.resvSeq == r.seq {
		if r.giveBack() {
			b.resvSeq = r.prev
		}
	}
	return true // forfeited if a later reservation stands on it
}

// giveBack swaps each shard's z back where nothing was taken since, and
// reports whether every shard was restored. It requires b.resvMu held.
func (r *reservation) giveBack() bool {
	b := r.b
	all := true
	for i := range r.z {
		if r.z[i] != r.old[i] && !b.shards[i].z.CompareAndSwap(r.z[i], r.old[i]) {
			all = false
		}
	}
	b.gaveBack()
	return all
}
