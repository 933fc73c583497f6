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
	// The limit at reservation time, which can change later: tokens
	// reserved after this one are counted at this rate. (Its exact ratio is
	// not stored, which keeps a Reservation at 64 bytes, x/time/rate's size
	// class; CancelAt recomputes it if the limit has changed since.)
	limit Limit
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
func (r *Reservation) CancelAt(t time.Time) { r.cancel(t, 0, false) }

// cancel is CancelAt at t or, if implicit, at the clock reading now.
func (r *Reservation) cancel(t time.Time, now int64, implicit bool) {
	if !r.ok {
		return
	}
	var d time.Duration
	if !implicit {
		d = t.Sub(epoch)
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
		act = offset(r.timeToAct, lim.origin())
	}
	if lim.limit == Inf || r.tokens == 0 || act.less(wide(ts)) || r.inf {
		return
	}
	// restore = tokens − gap·num/den tokens, with gap clamped at 0: a
	// reservation acting before this one cannot have been reserved after
	// it; and at MaxInt64, as x/time/rate's time.Time.Sub saturates. In
	// the reservation's units, then the limiter's.
	num, den, fill := lim.num, lim.den, lim.fill
	if r.limit != lim.limit {
		num, den, fill = ratio(r.limit, 1)
	}
	den = max(den, 1)
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
	b := lim.advance(ts)
	restore := rescale(own.sub(later), den, lim.den)
	if lim.capB.sub(b).ule(restore) {
		b = lim.capB
	} else {
		b = b.add(restore)
	}
	lim.tokens = b
	lim.setLast(ts)

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
