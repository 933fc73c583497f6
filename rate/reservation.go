package rate

import (
	"math"
	"math/bits"
	"time"
)

// A Reservation holds information about events that are permitted by a
// Limiter to happen after a delay. A Reservation may be cancelled, once,
// which may let the Limiter permit additional events. Its methods are safe
// for concurrent use. The zero value is a Reservation that is not OK. A
// Reservation must not be copied: a copy could be cancelled once more.
type Reservation struct {
	ok        bool
	inf       bool   // made while the limit was Inf: it consumed nothing
	cancelled bool   // a Cancel or CancelAt has run; guarded by lim.mu
	axis      uint32 // the limiter's axis when it was made: act is on it
	lim       *Limiter
	tokens    int
	timeToAct time.Time
	act       int64 // timeToAct on the limiter's axis, saturated at MaxInt64
	// The limiter's seq after this reservation took its tokens: the
	// tokens reserved after it, and the changes of the limit or burst
	// since, count from it. (The limit at reservation time is not stored,
	// which keeps a Reservation at 64 bytes, x/time/rate's size class:
	// while no change came since, it is the limiter's.)
	seq uint64
}

// OK reports whether the limiter can provide the requested number of
// tokens within the maximum wait time. If OK is false, Delay returns
// InfDuration, and Cancel does nothing.
func (r *Reservation) OK() bool { return r.ok }

// Delay is shorthand for DelayFrom(time.Now()).
func (r *Reservation) Delay() time.Duration { return r.DelayFrom(time.Now()) }

// DelayFrom returns the duration for which the reservation holder must
// wait before taking the reserved action. Zero means act immediately;
// InfDuration means the limiter cannot grant the tokens requested in this
// Reservation within the maximum wait time.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	if !r.ok {
		return InfDuration
	}
	return max(r.timeToAct.Sub(t), 0)
}

// Cancel is CancelAt at the current time, read as the package doc
// describes: it never moves the limiter's time backwards.
func (r *Reservation) Cancel() { r.cancel(time.Time{}, nanotime(), true) }

// CancelAt indicates that the reservation holder will not perform the
// reserved action and reverses its effect on the rate limit as far as
// possible, considering that other reservations may have been made since:
// if t is not after the time to act, it gives back the reservation's tokens
// less those reserved after it, counted at the reservation's limit from its
// time to act to the latest one. Unlike x/time/rate it never gives back more
// than the reservation took, and only the first call to Cancel or CancelAt
// on a Reservation has an effect: later calls do nothing, whatever their
// time (see the package doc).
//
// If the limit or burst changed since the reservation, the rate it was
// counted at no longer tells the tokens reserved after it, and the bucket
// may have refilled past what the reservation owed: it gives back its
// tokens less every token reserved after it, and no more than would bring
// the highest balance the limiter has had since it, plus those tokens, up
// to the burst; a reservation older than the last four changes gives
// nothing back. So a cancellation never lets the limiter admit more than
// the burst plus the limit's refill over any span, at the price of giving
// back less than a limiter without the reservation would hold when later
// reservations have already acted.
func (r *Reservation) CancelAt(t time.Time) { r.cancel(t, 0, false) }

// cancel is CancelAt at t or, if implicit, at the clock reading now.
func (r *Reservation) cancel(t time.Time, now int64, implicit bool) {
	if !r.ok {
		return
	}
	var d time.Duration
	if !implicit {
		d, t = since(t)
	}
	lim := r.lim
	lim.mu.Lock()
	defer lim.mu.Unlock()
	if r.cancelled {
		return // the tokens were given back, or could not be, once already
	}
	r.cancelled = true
	var ts int64
	if implicit {
		ts = lim.now(now)
	} else {
		ts = lim.at(t, d)
	}
	// The time to act on the limiter's axis now: act, unless the axis has
	// moved since or act saturated.
	act := wide(r.act)
	if r.axis != lim.axis || r.act == math.MaxInt64 {
		// timeToAct is in the caller's terms (reserveN): put it on the axis
		// as since does, with the wall clock's steps as they are now.
		_, tt := since(r.timeToAct)
		act = offset(tt, lim.origin())
	}
	if lim.limit == Inf || r.tokens == 0 || act.less(wide(ts)) || r.inf {
		return
	}
	if lim.changes != 0 && lim.changedSince(r, lim.gens[(lim.changes-1)%genRing].start) {
		if wide(ts).less(act) {
			lim.cancelChanged(r, ts)
		}
		return
	}
	// restore = tokens − gap·num/den tokens, with gap clamped at 0: a
	// reservation acting before this one cannot have been reserved after
	// it; and at MaxInt64, as x/time/rate's time.Time.Sub saturates. No
	// change since the reservation: its limit is the limiter's.
	num, den, fill := lim.num, max(lim.den, 1), lim.fill
	event := lim.eventWide()
	var gap uint64
	if act.less(event) {
		gap = uint64(clampDuration(event.sub(act)))
	}
	if fill && gap > 0 {
		return // a later reservation, at a rate without bound: it took them all
	}
	later := mul(gap, num) // < 2^128: compared as unsigned
	own := mul(uint64(r.tokens), den)
	if own.ule(later) {
		return // nothing left to restore
	}
	lim.giveBack(lim.advance(ts), own.sub(later), ts)

	if act == event {
		// The time to act of the reservation before this one, as
		// x/time/rate computes it: tokens at the reservation's limit before
		// this one's, or InfDuration after it if that limit was zero. (A
		// span beyond MaxInt64 leaves lastEvent as it is.)
		prev, ok := act.add(wide(int64(InfDuration))), true
		if fill {
			prev = act
		} else if num != 0 {
			hi, lo := bits.Mul64(uint64(r.tokens), den)
			ok = false
			if hi < num {
				if d, _ := bits.Div64(hi, lo, num); d <= math.MaxInt64 {
					prev, ok = act.sub(wide(int64(d))), true
				}
			}
		}
		if ok && !prev.less(wide(ts)) {
			lim.setEventWide(prev)
		}
	}
}

// changedSince reports whether a change that began at start in seq came after r:
// start lies in (r.seq, lim.seq], counted modulo 2^64, as seq wraps after
// 2^64 tokens (seconds at a rate of 1e18/s and a burst of 2^62). It
// requires lim.mu, and fewer than 2^64 tokens reserved since r.
func (lim *Limiter) changedSince(r *Reservation, start uint64) bool {
	return start-r.seq-1 < lim.seq-r.seq
}

// cancelChanged is cancel for a reservation made before a change of the
// limit or burst, not yet acted on at ts. It requires lim.mu.
//
// It restores min(tokens − after, cap − peak − after): after, every token
// reserved since (lim.seq counts them, with one per change), so that the
// reservations made since keep their times to act, as the rate-counted gap
// keeps them while the limit holds, and act within the burst beside what
// comes back; peak, an upper bound of the highest balance since
// the reservation: zero or the highest since each change that came after
// it, whichever is higher. (Between the reservation and the first of them
// the rate was fixed, and a reservation whose time to act is still ahead
// is in debt until then: the balance was at most zero. One whose time to
// act is now may have taken from a positive balance, whose height nothing
// kept: it gives nothing back.) A limiter that never had the
// reservation would have had a balance higher by its tokens, less what
// its cap discarded, tokens − (peak + tokens − cap) if positive: restoring
// more would admit what that limiter could not. The latest time to act is
// left as it is: counted at a rate that has changed since, it cannot be
// moved back by this one's tokens.
func (lim *Limiter) cancelChanged(r *Reservation, ts int64) {
	n := min(lim.changes, genRing)
	k := uint64(0) // changes since the reservation
	var peak fixed // zero, then the highest of theirs and the balance now
	b := lim.balance(ts)
	if peak.less(b) {
		peak = b
	}
	for i := uint64(0); i < n; i++ {
		g := lim.gens[(lim.changes-1-i)%genRing]
		if !lim.changedSince(r, g.start) {
			break
		}
		if peak.less(g.peak) {
			peak = g.peak
		}
		k++
	}
	if k == genRing && lim.changes > genRing {
		return // perhaps older than the changes kept: nothing known to give back
	}
	// Every token reserved since, whether its reservation still waits or
	// has acted: behind this one's debt, a later reservation acts later
	// than it would have without it, so even one that has acted may act
	// close to what the restored tokens admit next; and after a raise a
	// waiting reservation's tokens may have partly refilled, so the debt
	// does not bound them either. (Giving back more where they have acted
	// broke the window bound by fractions of a token in a model run.)
	after := mul(min(lim.seq-r.seq-k, uint64(r.tokens)), lim.den) // more would restore nothing either
	// They act within the burst too: the room is what the peak leaves,
	// less their tokens.
	restore := mul(uint64(r.tokens), lim.den)
	if restore.ule(after) || !peak.add(after).less(lim.capB) {
		return
	}
	restore = restore.sub(after)
	if room := lim.capB.sub(peak).sub(after); room.less(restore) {
		restore = room
	}
	lim.peak(b) // the balance now is the limiter's: it updates to ts
	lim.giveBack(b, restore, ts)
}

// giveBack adds restore units to the balance b at ts, capped at the burst,
// and applies it. It requires lim.mu.
func (lim *Limiter) giveBack(b, restore fixed, ts int64) {
	if lim.capB.sub(b).ule(restore) {
		b = lim.capB
	} else {
		b = b.add(restore)
	}
	lim.tokens = b
	lim.setLast(ts)
}
