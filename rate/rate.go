// Package rate implements a token-bucket rate limiter with the API and the
// documented behaviour of golang.org/x/time/rate v0.16.0, so that code
// switches to it by changing one import path:
//
//	import "github.com/admit-go/admit/rate" // was "golang.org/x/time/rate"
//
// x/time/rate's own tests (rate_test.go and sometimes_test.go of v0.16.0)
// run unchanged against this package in `make test`.
//
// # What is different
//
// Never over-admits through the implicit-time API. x/time/rate's Allow
// reads time.Now before it takes the limiter's lock; a caller that applies
// an older reading after a newer one moves the limiter's time backwards and
// the same interval is refilled twice (golang/go#65508, #57074). Here Allow,
// Reserve, Wait, WaitN, SetLimit, SetBurst, Tokens and Cancel never move the
// limiter's time backwards: a reading older than the latest one applied is
// applied as that latest time, so it adds nothing. The clock is read just
// before the lock (the monotonic clock only, without the wall clock
// time.Now also reads) so that contending callers do not serialise on the
// clock read; the clamp inside the lock gives the same guarantee as reading
// it inside.
//
// Exact arithmetic. The rate is an exact ratio num/den tokens per
// nanosecond (Limit(0.1) is exactly 1/10 per second, Every(3*time.Second)
// exactly 1/3; the rules are in exact.go) and the balance an integer count
// of 1/den tokens in 128 bits, so refill is exact and no rounding error
// accumulates over any number of calls. Reservation delays are the exact
// delay rounded down to a nanosecond, as x/time/rate's truncating
// conversion intends. A rate that no 64-bit fraction holds exactly, such
// as Limit(7.0/86400), is read as the closest such fraction below it
// (within a factor 1 − 2^-62), so its delays are never early and at most
// 1 ns late (for delays under 73 years). A SetLimit between rates of
// different denominators rounds the balance down to the new unit, once
// (rates with at most 10 decimal places below 1.8e9/s share one
// denominator, 10^19).
//
// The one remaining difference, kept on purpose. The explicit-time methods
// (AllowN, ReserveN, SetLimitAt, SetBurstAt, CancelAt, TokensAt) behave as
// x/time/rate documents and its tests require: given a time earlier than
// the limiter's latest, they act at that time and move the limiter's time
// back to it. A program that passes out-of-order times to them can still be
// refilled twice for the same interval, exactly as with x/time/rate; use
// the implicit-time methods, or pass times that never go backwards.
//
// Where x/time/rate's behaviour is unsound and its tests do not pin it,
// this package takes the sound choice:
//
//   - A Reservation is cancelled at most once: only the first Cancel or
//     CancelAt has an effect. x/time/rate gives the tokens back on every
//     call, so cancelling one reservation repeatedly admits without bound.
//   - CancelAt restores at most the reservation's own tokens. x/time/rate
//     restores tokens − limit·(lastEvent − timeToAct), which exceeds tokens
//     when lastEvent lies before the reservation's timeToAct (a later
//     reservation acting earlier, after SetLimit raised the rate or at an
//     earlier explicit time).
//   - Cancelling a reservation made while the limit was Inf restores
//     nothing: it consumed nothing. x/time/rate restores all of its tokens if
//     the limit has become finite since.
//   - A negative n is refused (AllowN false, ReserveN not OK, WaitN an
//     error) for finite limits; x/time/rate adds -n tokens to the balance.
//   - A NaN limit refills nothing; in x/time/rate it makes the balance NaN,
//     after which every request up to the burst is allowed.
//
// Times work in any era, as time.Time differences, as in x/time/rate: a
// limiter driven from the zero time.Time, or centuries from now, refills
// as one driven from time.Now, and a gap longer than time.Duration holds
// (292 years) refills 2^63−1 ns' worth, as x/time/rate's saturating Sub
// does. (A limiter keeps its times as int64 offsets from an origin that
// moves when a time more than 146 years from it arrives; see axis.go.)
// The one limit of the arithmetic, not reachable in practice: a
// reservation that would take the balance more than 2^62 tokens below
// zero is not OK.
//
// # When to pick it
//
// Pick this package for code written against x/time/rate's API
// (reservations, explicit times, SetLimit, Sometimes): one import line buys
// the over-admission fix and exact arithmetic. Allow costs one monotonic
// clock read, an uncontended lock and a 128-bit multiply-add; measured on
// a busy 2-core machine it is about twice as fast as x/time/rate's, with
// the same allocations (docs/rate.md has the numbers). New code that only
// allows and waits can use the module's buckets (mutexbucket, casbucket,
// shardedbucket), which implement admit.Limiter and, on many cores, scale
// further.
package rate

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/admit-go/admit"
)

// Limit defines the maximum frequency of some events, in events per second.
// A zero Limit allows no events.
type Limit float64

// Inf is the infinite rate limit; it allows all events, even if the burst
// is zero.
const Inf = Limit(math.MaxFloat64)

// InfDuration is the duration returned by Delay when a Reservation is not
// OK.
const InfDuration = time.Duration(math.MaxInt64)

// Every converts a minimum time interval between events to a Limit. An
// interval of zero or less is Inf.
func Every(interval time.Duration) Limit {
	if interval <= 0 {
		return Inf
	}
	return 1 / Limit(interval.Seconds())
}

// A Limiter controls how frequently events are allowed to happen. It is a
// token bucket of size burst, initially full and refilled at limit tokens
// per second; if the limit is Inf, the burst is ignored.
//
// Allow, Reserve and Wait each consume one token and differ in what they do
// when none is available: Allow returns false, Reserve returns a
// reservation for a future token and the time to wait for it, and Wait
// blocks until the token exists or its context ends. AllowN, ReserveN and
// WaitN consume n tokens.
//
// A Limiter is safe for concurrent use. The zero value is a valid Limiter
// that rejects all events; use NewLimiter for others. A Limiter must not be
// copied after first use.
type Limiter struct {
	mu    sync.Mutex
	limit Limit
	burst int

	// The balance as of last, exactly, in units of 1/den token; negative
	// while reservations wait, never below minB.
	tokens     fixed
	capB, minB fixed  // burstCap(burst) and minTokens in units: the bounds
	num, den   uint64 // the rate: num/den tokens per nanosecond; den > 0 once set
	fill       bool   // the rate fills the bucket in any positive time (Inf)
	inf        bool   // limit == Inf: reservations bypass the bucket
	// odd: axis != 0 || lastFar || eventFar (axis.go); it sends Allow to
	// the general path.
	odd, lastFar, eventFar bool

	last      int64 // time of the latest update (never for a new limiter)
	lastEvent int64 // latest time to act of a reservation, past or future

	// The time axis (axis.go): last and lastEvent are nanoseconds from the
	// epoch while axis is 0, else from base; lastW and eventW hold them
	// instead while lastFar and eventFar are set.
	axis, axes    uint32 // the axis's number; the latest one given out
	base          time.Time
	lastW, eventW fixed

	// Cancel's bookkeeping across changes of the limit or burst
	// (reservation.go). seq counts the tokens taken by reserve and by
	// Allow's fast path, allow1, plus one per change; a Reservation keeps
	// its value. changes counts the
	// changes; gens holds the latest genRing of them: where each began in
	// seq, and the highest balance since it began (units of 1/den, rounded
	// up when den changes), kept by advance and allow1 once there was a
	// change.
	seq, changes uint64
	gens         [genRing]gen
}

// genRing is how many changes of the limit or burst Cancel can see past: a
// reservation older than that many gives nothing back.
const genRing = 4

// gen is one change of the limit or burst: seq at its start, and the peak
// balance since.
type gen struct {
	start uint64
	peak  fixed
}

// NewLimiter returns a new Limiter that allows events up to rate r and
// permits bursts of at most b tokens. It starts full.
//
// The rate comes first, as in golang.org/x/time/rate; every other limiter
// of this module takes the burst first: New(capacity, refillPerSecond).
func NewLimiter(r Limit, b int) *Limiter {
	num, den, fill := ratio(r, 1)
	lim := &Limiter{limit: r, burst: b, num: num, den: den, fill: fill, inf: r == Inf, last: never}
	lim.bounds()
	lim.tokens = lim.capB
	return lim
}

// bounds recomputes capB and minB after a change of burst or den.
func (lim *Limiter) bounds() {
	lim.capB = tokensFixed(burstCap(lim.burst), lim.den)
	lim.minB = tokensFixed(minTokens, lim.den)
}

// Limit returns the maximum overall event rate.
func (lim *Limiter) Limit() Limit {
	lim.mu.Lock()
	defer lim.mu.Unlock()
	return lim.limit
}

// Burst returns the maximum burst size: the most tokens one call to Allow,
// Reserve or Wait can consume. A zero Burst allows no events, unless the
// limit is Inf.
func (lim *Limiter) Burst() int {
	lim.mu.Lock()
	defer lim.mu.Unlock()
	return lim.burst
}

// TokensAt returns the number of tokens available at time t. A t before the
// limiter's latest update sees the balance of that update. As in
// x/time/rate it changes nothing: it reads the balance with refill, not
// advance, so that a balance the limiter never reached (t far ahead of the
// calls that follow) does not become the peak a later Cancel is held to.
func (lim *Limiter) TokensAt(t time.Time) float64 {
	d, t := since(t)
	lim.mu.Lock()
	b := lim.refill(lim.at(t, d))
	den := lim.den
	lim.mu.Unlock()
	return float(b, den)
}

// Tokens returns the number of tokens available now. Like TokensAt, it
// changes nothing.
func (lim *Limiter) Tokens() float64 {
	now := nanotime()
	lim.mu.Lock()
	b := lim.refill(lim.now(now))
	den := lim.den
	lim.mu.Unlock()
	return float(b, den)
}

// Allow reports whether an event may happen now, and consumes a token if
// so.
func (lim *Limiter) Allow() bool {
	now := nanotime()
	lim.mu.Lock()
	ok := lim.allow1(lim.now(now))
	lim.mu.Unlock()
	return ok
}

// allow1 is reserve(ts, 1, 0) with advance written out for the common
// case, a finite rate, a balance below the burst and times on the epoch's
// axis within int64 (so ts − last < 2^63, see axis.go), so that Allow makes
// no call inside the lock. Every other case goes through reserve. It
// requires lim.mu.
func (lim *Limiter) allow1(ts int64) bool {
	if lim.odd || lim.fill || lim.num == 0 || lim.den == 0 || lim.burst < 1 || !lim.tokens.less(lim.capB) {
		ok, _ := lim.reserve(ts, 1, 0)
		return ok
	}
	b := lim.tokens
	if ts > lim.last {
		if add := mul(uint64(ts)-uint64(lim.last), lim.num); lim.capB.sub(b).ule(add) {
			b = lim.capB
		} else {
			b = b.add(add)
		}
	}
	after := b.sub(fixed{0, lim.den})
	if after.negative() {
		// reserve's wait ⌊deficit/num⌋ is 0 only for a deficit below num.
		// (A deficit that small is far from minB.)
		if d := after.neg(); d.hi != 0 || d.lo >= lim.num {
			return false // refused: the peak stays as it was
		}
	}
	if lim.changes != 0 {
		// The balance before the take, b, from after: so that b need not
		// live past the refusal, which measurably slowed this path.
		lim.peak(after.add(fixed{0, lim.den}))
	}
	lim.tokens, lim.last, lim.lastEvent = after, ts, ts
	lim.seq++ // as reserve counts it: a later Cancel gives back less by it
	return true
}

// AllowN reports whether n events may happen at time t, and consumes n
// tokens if so. Use it to drop or skip events that exceed the rate limit;
// otherwise use Reserve or Wait.
func (lim *Limiter) AllowN(t time.Time, n int) bool {
	d, t := since(t)
	lim.mu.Lock()
	ok, _ := lim.reserve(lim.at(t, d), n, 0)
	lim.mu.Unlock()
	return ok
}

// Reserve is shorthand for ReserveN(time.Now(), 1), with the clock read as
// the package doc describes.
func (lim *Limiter) Reserve() *Reservation {
	now := nanotime()
	lim.mu.Lock()
	ts := lim.now(now)
	r, wait := lim.reservation(ts, 1, InfDuration)
	origin := lim.origin()
	lim.mu.Unlock()
	if r.ok {
		if r.act != math.MaxInt64 {
			r.timeToAct = origin.Add(time.Duration(r.act))
		} else { // ts + wait saturated
			r.timeToAct = origin.Add(time.Duration(ts)).Add(time.Duration(wait))
		}
	}
	return &r
}

// ReserveN returns a Reservation that says how long the caller must wait
// before n events happen. The Limiter takes the reservation into account
// when allowing future events. The reservation is not OK if n exceeds the
// burst (and the limit is not Inf).
//
//	r := lim.ReserveN(time.Now(), 1)
//	if !r.OK() {
//		return // not allowed to act: is the burst > 0?
//	}
//	time.Sleep(r.Delay())
//	act()
//
// Use it to wait and slow down without dropping events. To respect a
// deadline or cancel the wait, use Wait; to drop events, use Allow.
func (lim *Limiter) ReserveN(t time.Time, n int) *Reservation {
	r := lim.reserveN(t, n, InfDuration)
	return &r
}

// reserveN reserves n tokens at t if the wait is at most maxFutureReserve.
// It returns a Reservation, not a pointer, so that callers that do not keep
// it do not allocate.
//
// The time to act is the caller's t plus the wait, in the caller's own
// terms, as x/time/rate's: not the time since puts on the axis, which a
// time without a monotonic reading is shifted to by the wall clock's steps
// (DelayFrom(t) would be off by the step: after a resume from suspend,
// every reservation's delay would read 0).
func (lim *Limiter) reserveN(t time.Time, n int, maxFutureReserve time.Duration) Reservation {
	d, ta := since(t)
	lim.mu.Lock()
	r, wait := lim.reservation(lim.at(ta, d), n, maxFutureReserve)
	lim.mu.Unlock()
	if r.ok {
		r.timeToAct = t.Add(time.Duration(wait))
	}
	return r
}

// reservation is reserve, wrapped in a Reservation (timeToAct is left to
// the caller). It requires lim.mu.
func (lim *Limiter) reservation(ts int64, n int, maxWait time.Duration) (Reservation, int64) {
	inf := lim.inf
	ok, wait := lim.reserve(ts, n, maxWait)
	r := Reservation{ok: ok, lim: lim, seq: lim.seq, axis: lim.axis}
	if ok {
		r.tokens = n
		r.act = addSat(ts, wait)
		r.inf = inf
	}
	return r, wait
}

// Wait is shorthand for WaitN(ctx, 1).
func (lim *Limiter) Wait(ctx context.Context) error {
	return lim.WaitN(ctx, 1)
}

// WaitN blocks until lim permits n events to happen. It returns an error if
// n exceeds the burst (unless the limit is Inf), if ctx is done, or if the
// wait would run past ctx's deadline; in the last case it returns at once,
// with an error that matches both admit.ErrDeadline and
// context.DeadlineExceeded (errors.Is), as the module's buckets do. If ctx
// ends while waiting, the reservation is cancelled (see Reservation.Cancel)
// and ctx.Err() is returned.
func (lim *Limiter) WaitN(ctx context.Context, n int) error {
	return lim.waitAt(ctx, n, time.Time{}, nanotime(), true, realTimer)
}

// wait is WaitN at the explicit time t, with timers from newTimer; the
// tests that come with x/time/rate call it with a fake clock.
//
//lint:ignore U1000 called by x/time/rate's rate_test.go, which make test adds to the package
func (lim *Limiter) wait(ctx context.Context, n int, t time.Time, newTimer func(d time.Duration) (<-chan time.Time, func() bool, func())) error {
	return lim.waitAt(ctx, n, t, 0, false, newTimer)
}

func realTimer(d time.Duration) (<-chan time.Time, func() bool, func()) {
	timer := time.NewTimer(d)
	return timer.C, timer.Stop, func() {}
}

// waitError is a Wait error: x/time/rate's text, and the errors it matches
// with errors.Is: the admit sentinel it corresponds to and, for a deadline,
// context.DeadlineExceeded, as the module's buckets' AcquireN errors do.
type waitError struct {
	msg  string
	kind []error
}

// The kinds, shared by every waitError (errors.Is only reads them).
var (
	unsatisfiable = []error{admit.ErrUnsatisfiable}
	pastDeadline  = []error{admit.ErrDeadline, context.DeadlineExceeded}
)

func (e *waitError) Error() string   { return e.msg }
func (e *waitError) Unwrap() []error { return e.kind }

// waitAt is WaitN at t or, if implicit, at the clock reading now.
func (lim *Limiter) waitAt(ctx context.Context, n int, t time.Time, now int64, implicit bool, newTimer func(d time.Duration) (<-chan time.Time, func() bool, func())) error {
	lim.mu.Lock()
	burst, limit := lim.burst, lim.limit
	lim.mu.Unlock()
	if n > burst && limit != Inf {
		return &waitError{fmt.Sprintf("rate: Wait(n=%d) exceeds limiter's burst %d", n, burst), unsatisfiable}
	}
	if n < 0 && limit != Inf {
		return &waitError{fmt.Sprintf("rate: Wait(n=%d) is negative", n), unsatisfiable}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
	}
	dl, hasDeadline := ctx.Deadline()
	if hasDeadline {
		// A deadline without a monotonic reading is put on the axis as
		// since puts such times: less the wall clock's steps.
		_, dl = since(dl)
	}
	var d time.Duration
	if !implicit {
		d, t = since(t)
	}
	lim.mu.Lock()
	var ts int64
	if implicit {
		ts = lim.now(now)
	} else {
		ts = lim.at(t, d)
	}
	maxWait := InfDuration
	if hasDeadline {
		maxWait = time.Duration(clampDuration(offset(dl, lim.origin()).sub(wide(ts))))
	}
	inf := lim.inf
	ok, wait := lim.reserve(ts, n, maxWait)
	var r Reservation
	if ok && wait > 0 {
		// For the cancel below: it finds the time to act on whatever axis
		// the limiter is on by then.
		r = Reservation{ok: true, lim: lim, tokens: n, act: addSat(ts, wait), seq: lim.seq, inf: inf, axis: lim.axis,
			timeToAct: lim.real(ts).Add(time.Duration(wait))}
	}
	lim.mu.Unlock()
	if !ok {
		return &waitError{fmt.Sprintf("rate: Wait(n=%d) would exceed context deadline", n), pastDeadline}
	}
	if wait == 0 {
		return nil
	}
	ch, stop, advance := newTimer(time.Duration(wait))
	defer stop()
	advance() // only has an effect when testing
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		// Give the tokens back, as far as later reservations allow.
		r.Cancel()
		return ctx.Err()
	}
}

// SetLimit is SetLimitAt at the current time, read as the package doc
// describes.
func (lim *Limiter) SetLimit(newLimit Limit) {
	now := nanotime()
	lim.mu.Lock()
	lim.setLimit(lim.now(now), newLimit)
	lim.mu.Unlock()
}

// SetLimitAt sets a new Limit for the limiter as of t. The new Limit, and
// Burst, may be violated or underutilized by those which reserved (using
// Reserve or Wait) but did not yet act before SetLimitAt was called.
func (lim *Limiter) SetLimitAt(t time.Time, newLimit Limit) {
	d, t := since(t)
	lim.mu.Lock()
	lim.setLimit(lim.at(t, d), newLimit)
	lim.mu.Unlock()
}

func (lim *Limiter) setLimit(ts int64, newLimit Limit) {
	b := lim.advance(ts)
	num, den, fill := ratio(newLimit, lim.den)
	lim.tokens = rescale(b, lim.den, den)
	lim.setLast(ts)
	if den != lim.den {
		for i := range lim.gens {
			// Rounded up: a peak stands for the most Cancel may assume.
			lim.gens[i].peak = rescale(lim.gens[i].peak.neg(), lim.den, den).neg()
		}
	}
	lim.limit, lim.num, lim.den, lim.fill, lim.inf = newLimit, num, den, fill, newLimit == Inf
	lim.bounds()
	lim.change()
}

// change records a change of the limit or burst, made at the time of the
// latest update: a new gen, whose peak so far is the balance. It requires
// lim.mu.
func (lim *Limiter) change() {
	lim.seq++
	lim.gens[lim.changes%genRing] = gen{start: lim.seq, peak: lim.tokens}
	lim.changes++
}

// SetBurst is SetBurstAt at the current time, read as the package doc
// describes.
func (lim *Limiter) SetBurst(newBurst int) {
	now := nanotime()
	lim.mu.Lock()
	lim.setBurst(lim.now(now), newBurst)
	lim.mu.Unlock()
}

// SetBurstAt sets a new burst size for the limiter as of t. A balance above
// the new burst is cut to it at the next update.
func (lim *Limiter) SetBurstAt(t time.Time, newBurst int) {
	d, t := since(t)
	lim.mu.Lock()
	lim.setBurst(lim.at(t, d), newBurst)
	lim.mu.Unlock()
}

func (lim *Limiter) setBurst(ts int64, newBurst int) {
	lim.tokens = lim.advance(ts)
	lim.setLast(ts)
	lim.burst = newBurst
	lim.bounds()
	lim.change()
}

// reserve takes n tokens at time ts if n is within the burst and the wait
// for them is at most maxWait, and returns the wait. It requires lim.mu.
func (lim *Limiter) reserve(ts int64, n int, maxWait time.Duration) (bool, int64) {
	if lim.inf {
		return true, 0
	}
	if n < 0 {
		return false, 0
	}
	b := lim.balance(ts)
	need := mul(uint64(n), lim.den)
	if b.less(lim.minB.add(need)) {
		return false, 0 // deeper in debt than the arithmetic allows
	}
	after := b.sub(need)
	var wait int64
	if after.negative() && !lim.fill {
		wait = delay(after.neg(), lim.num)
	}
	if n > lim.burst || wait > int64(maxWait) {
		return false, 0 // refused: it changes nothing, the peak included
	}
	if lim.changes != 0 {
		lim.peak(b)
	}
	lim.tokens = after
	lim.seq += uint64(n)
	lim.setLast(ts)
	lim.setEvent(ts, wait)
	return true, wait
}

// advance returns the balance at time ts, as balance does, for a call that
// updates the limiter to ts, and once the limit or burst has changed it
// raises the latest change's peak to that balance. The balance is highest
// when it is read, before what it is read for takes from it, and between
// updates it only rises, so the peak is the highest balance at an update.
// A call that updates nothing (TokensAt, a refused AllowN or ReserveN, a
// Cancel that gives nothing back) leaves the peak alone: the balance it
// read at a later time was never the limiter's, as x/time/rate's such calls
// change nothing. It requires lim.mu.
func (lim *Limiter) advance(ts int64) fixed {
	b := lim.balance(ts)
	if lim.changes != 0 {
		lim.peak(b)
	}
	return b
}

// balance returns the balance at time ts, as refill does, for a call that
// may update the limiter: it gives a zero Limiter its denominator first,
// which changes nothing observable. It requires lim.mu.
func (lim *Limiter) balance(ts int64) fixed {
	if lim.den == 0 {
		lim.den = 1
		lim.bounds()
	}
	return lim.refill(ts)
}

// peak raises the latest change's peak to b, once the balance b is the
// limiter's (at an update). It requires lim.mu and a change.
func (lim *Limiter) peak(b fixed) {
	if g := &lim.gens[(lim.changes-1)%genRing]; g.peak.less(b) {
		g.peak = b
	}
}

// refill returns the balance at time ts without changing lim: refilled
// from last if ts is later, unchanged otherwise, and capped at the burst in
// either case. (A zero Limiter, den 0 until its first change, has balance
// and cap zero: it returns zero.) It requires lim.mu.
func (lim *Limiter) refill(ts int64) fixed {
	b := lim.tokens
	if !b.less(lim.capB) {
		return lim.capB
	}
	if dt := lim.since(ts); dt > 0 {
		if lim.fill {
			return lim.capB
		}
		if lim.num != 0 {
			// room < 2^128 and the refill is compared before it is added,
			// so nothing overflows however long the span.
			add := mul(dt, lim.num)
			if lim.capB.sub(b).ule(add) {
				return lim.capB
			}
			b = b.add(add)
		}
	}
	return b
}
