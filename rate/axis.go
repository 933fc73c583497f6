package rate

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// The time axis.
//
// A limiter keeps its times (last, lastEvent, a reservation's act) as int64
// nanoseconds from an origin: the package's epoch, a reading of the
// monotonic clock taken at initialisation (axis 0, where the implicit-time
// API's clock readings already are), or a time a caller passed (axis 1,
// 2, …). Every time a method is given is converted to the axis under the
// lock: one within ±window (2^62 ns, 146 years) of the origin is its
// offset; a farther one first moves the origin (rebase), back to the epoch
// if the time is within the window of it, else to the time itself. The
// limiter's state times are then re-expressed exactly on the new axis; one
// that no longer fits an int64 (more than 292 years away) is kept in 128
// bits instead (lastW, eventW), which only the general paths read. So the
// arithmetic sees the differences time.Time.Sub gives, as x/time/rate's
// does, in any era: a limiter driven from the zero time.Time refills as
// one driven from time.Now, and a gap Sub saturates saturates here too.
// The implicit-time methods convert the clock's reading the same way (on
// axis 0, a no-op) and then take the later of it and last, so a stale
// reading still adds nothing; a last far in the future moves the axis to
// it.
//
// A Reservation records the axis it was made on; cancel converts its
// timeToAct when the limiter has moved to another since. (Axis numbers are
// 32 bits: a reservation that outlives 2^32 moves could read its act on
// the wrong axis, which changes how much of it is given back, never more
// than its own tokens, once.)
//
// Invariants, under lim.mu: a converted time ts satisfies |ts| < window;
// last is never, or lies in [−window, MaxInt64] (a farther last is lastW,
// with lastFar set), so a refill's ts − last is below 2^63 on the fast
// path; odd is set while the axis is not the epoch's or lastFar or
// eventFar is set, and sends Allow to the general path. A move of the axis
// changes no decision: the times keep their differences exactly.
const window = int64(1) << 62

// never is the time of a NewLimiter's last update: before any time a caller
// can pass, like x/time/rate's zero time.Time.
const never = math.MinInt64

// wide is a signed 128-bit integer (a fixed used for nanoseconds): a time
// on the axis exactly, however far from its origin.
func wide(x int64) fixed {
	if x < 0 {
		return fixed{math.MaxUint64, uint64(x)}
	}
	return fixed{0, uint64(x)}
}

// narrow returns w as an int64, if it fits.
func narrow(w fixed) (int64, bool) {
	if (w.hi == 0 && w.lo <= math.MaxInt64) || (w.hi == math.MaxUint64 && w.lo > math.MaxInt64) {
		return int64(w.lo), true
	}
	return 0, false
}

// clampDuration returns w clamped into int64, as time.Time.Sub saturates.
func clampDuration(w fixed) int64 {
	if x, ok := narrow(w); ok {
		return x
	}
	if w.negative() {
		return math.MinInt64
	}
	return math.MaxInt64
}

// offset returns t − o in nanoseconds, exactly: time.Time.Sub (which uses
// the monotonic readings when both carry one) when it does not saturate,
// else from the wall clocks' seconds and nanoseconds.
func offset(t, o time.Time) fixed {
	if d := t.Sub(o); d > math.MinInt64 && d < math.MaxInt64 {
		return wide(int64(d))
	}
	s := wide(t.Unix()).sub(wide(o.Unix())) // |s| < 2^64: Unix seconds are int64
	neg := s.negative()
	if neg {
		s = s.neg()
	}
	hi, lo := bits.Mul64(s.lo, 1e9)
	w := fixed{hi + s.hi*1e9, lo}
	if neg {
		w = w.neg()
	}
	return w.add(wide(int64(t.Nanosecond() - o.Nanosecond())))
}

// since returns t's offset from the epoch, as the axis measures it, and the
// time at that offset for the slow path. A t with a monotonic clock reading
// (time.Now's) is measured by it. One without (time.Now().UTC(), Round(0),
// a time parsed or built from the calendar) is measured by the wall clock,
// less the steps the wall clock has taken since the epoch: so both kinds of
// time agree after the wall clock was stepped, as x/time/rate's do (its Sub
// falls back to the wall clock when either time lacks a monotonic reading),
// and Allow, which reads the monotonic clock, cannot be mixed with
// AllowN(time.Now().UTC(), n) into an over-admission. A step is measured at
// each such call and taken when it moved by more than stepTolerance, so that
// the jitter between the two clocks' readings never moves a time.
func since(t time.Time) (time.Duration, time.Time) {
	if t != t.Round(0) {
		return t.Sub(epoch), t
	}
	step := wallStepNow()
	cur := wallStep.Load()
	if step-cur > stepTolerance || cur-step > stepTolerance {
		wallStep.CompareAndSwap(cur, step)
		cur = wallStep.Load()
	}
	if cur == 0 {
		return t.Sub(epoch), t
	}
	t = t.Add(-time.Duration(cur))
	return t.Sub(epoch), t
}

// wallStepNow measures the wall clock's steps since the epoch: how much
// more wall time than monotonic time has passed. A variable for the tests,
// which cannot step the system's clock.
var wallStepNow = func() int64 {
	now := time.Now()
	return int64(now.Round(0).Sub(epochWall) - now.Sub(epoch))
}

// wallStep is the wall clock's steps since the epoch, in ns, as since last
// took them; stepTolerance is the change it ignores.
var wallStep atomic.Int64

const stepTolerance = int64(time.Millisecond)

// epochWall is epoch without its monotonic reading.
var epochWall = epoch.Round(0)

// origin is the time of the axis's 0.
func (lim *Limiter) origin() time.Time {
	if lim.axis == 0 {
		return epoch
	}
	return lim.base
}

// real returns the time at x on the axis.
func (lim *Limiter) real(x int64) time.Time { return lim.origin().Add(time.Duration(x)) }

// at converts t to the axis, moving the axis first if t is not within the
// window of its origin. d is t.Sub(epoch), computed before the lock. It
// requires lim.mu.
func (lim *Limiter) at(t time.Time, d time.Duration) int64 {
	if lim.axis == 0 && -window < int64(d) && int64(d) < window {
		return int64(d)
	}
	return lim.atSlow(t)
}

func (lim *Limiter) atSlow(t time.Time) int64 {
	if x, ok := narrow(offset(t, lim.origin())); ok && -window < x && x < window {
		return x
	}
	lim.rebase(t)
	x, _ := narrow(offset(t, lim.origin()))
	return x
}

// rebase moves the axis's origin to the epoch, if t is within the window
// of it, or to t, and re-expresses last and lastEvent exactly on the new
// axis. Outstanding reservations keep their act on the axis they were made
// on (r.axis), and cancel converts their timeToAct when it differs.
func (lim *Limiter) rebase(t time.Time) {
	old := lim.origin()
	if x, ok := narrow(offset(t, epoch)); ok && -window < x && x < window {
		lim.axis, lim.base = 0, time.Time{}
	} else {
		lim.axes++
		if lim.axes == 0 {
			lim.axes = 1 // 0 is the epoch's
		}
		lim.axis, lim.base = lim.axes, t
	}
	shift := offset(lim.origin(), old)
	if lim.last != never || lim.lastFar {
		lim.setLastWide(lim.lastWide().sub(shift))
	}
	lim.setEventWide(lim.eventWide().sub(shift))
	lim.reodd()
}

// now is the implicit-time API's time: the clock reading now (nanoseconds
// from the epoch) converted to the axis, or the limiter's last update if
// that is later, so that a stale reading adds nothing. It requires lim.mu.
func (lim *Limiter) now(now int64) int64 {
	if !lim.odd {
		return max(now, lim.last)
	}
	return lim.nowSlow(now)
}

func (lim *Limiter) nowSlow(now int64) int64 {
	ts := lim.atSlow(epoch.Add(time.Duration(now)))
	if !lim.lastFar {
		return max(ts, lim.last)
	}
	if lim.lastW.less(wide(ts)) {
		return ts // last is far in the past
	}
	// last is far in the future, and so is the limiter's time: move the
	// axis there.
	lim.rebase(lim.lastTime())
	return lim.last
}

// lastTime is the time of the latest update, for a last that is not never.
func (lim *Limiter) lastTime() time.Time { return lim.timeOf(lim.lastWide()) }

// timeOf returns the time at w on the axis. w came from a time.Time, so
// it is well inside what one holds (±2^94 ns). Within an int64 of the
// origin it is origin.Add(w); farther, it is built from the origin's Unix
// seconds and w split into seconds and nanoseconds, in constant time.
// (Adding MaxInt64 ns at a time took up to 2^30 additions, seconds under
// the lock on every implicit-time call after a far explicit time.)
func (lim *Limiter) timeOf(w fixed) time.Time {
	o := lim.origin()
	if x, ok := narrow(w); ok {
		return o.Add(time.Duration(x))
	}
	m := w
	if w.negative() {
		m = w.neg()
	}
	// Two times differ by less than 2^64 s, so m.hi/1e9 is 0; taking the
	// remainder keeps Div64 from panicking whatever w is.
	q, r := bits.Div64(m.hi%1e9, m.lo, 1e9)
	sec, nsec := int64(q), int64(r)
	if w.negative() {
		sec, nsec = -sec, -nsec
	}
	return time.Unix(o.Unix()+sec, int64(o.Nanosecond())+nsec).In(o.Location())
}

func (lim *Limiter) lastWide() fixed {
	if lim.lastFar {
		return lim.lastW
	}
	return wide(lim.last)
}

func (lim *Limiter) eventWide() fixed {
	if lim.eventFar {
		return lim.eventW
	}
	return wide(lim.lastEvent)
}

// setLastWide sets last to w, in int64 when it lies in [−window, MaxInt64].
func (lim *Limiter) setLastWide(w fixed) {
	if x, ok := narrow(w); ok && x >= -window {
		lim.last, lim.lastFar = x, false
	} else {
		lim.last, lim.lastW, lim.lastFar = never, w, true
	}
	lim.reodd()
}

func (lim *Limiter) reodd() { lim.odd = lim.axis != 0 || lim.lastFar || lim.eventFar }

func (lim *Limiter) setEventWide(w fixed) {
	if x, ok := narrow(w); ok {
		lim.lastEvent, lim.eventFar = x, false
	} else {
		lim.lastEvent, lim.eventW, lim.eventFar = 0, w, true
	}
	lim.reodd()
}

// setLast records an update at ts, a converted time.
func (lim *Limiter) setLast(ts int64) {
	lim.last = ts
	if lim.lastFar {
		lim.lastFar = false
		lim.reodd()
	}
}

// setEvent records a reservation's time to act, ts + wait, exactly.
func (lim *Limiter) setEvent(ts, wait int64) {
	if ts > math.MaxInt64-wait || lim.eventFar {
		lim.setEventSlow(ts, wait)
		return
	}
	lim.lastEvent = ts + wait
}

// setEventSlow is kept out of line so that setEvent inlines into reserve.
//
//go:noinline
func (lim *Limiter) setEventSlow(ts, wait int64) { lim.setEventWide(wide(ts).add(wide(wait))) }

// since returns the time from the latest update to ts, saturated at
// math.MaxInt64 as x/time/rate's time.Time.Sub is, and 0 if ts is not
// later.
func (lim *Limiter) since(ts int64) uint64 {
	if lim.lastFar {
		return lim.sinceFar(ts)
	}
	if ts <= lim.last {
		return 0
	}
	return min(uint64(ts)-uint64(lim.last), math.MaxInt64)
}

func (lim *Limiter) sinceFar(ts int64) uint64 {
	d := wide(ts).sub(lim.lastW)
	if d.negative() || d == (fixed{}) {
		return 0
	}
	return uint64(clampDuration(d))
}
