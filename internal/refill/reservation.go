package refill

// # Reservations and the tail rule
//
// Every bucket here can be described by one number, its empty point z on the
// refill stream: the balance at elapsed time t is min(Cap, V(t) − z), and
// taking n units moves z to max(z, V(t) − Cap) + n. (mutexbucket and
// casbucket store (tokens, last), from which z = V(last) − tokens; a
// shardedbucket shard stores z itself.) Each admission of n units at time t
// therefore owns the stream interval (a, a+n] it moved z across, with
//
//	V(t) − Cap <= a  and  a + n <= V(t),
//
// and the intervals of different admissions are disjoint. That is the whole
// proof of the bound: the admissions of any window [s, t] own disjoint
// intervals inside (V(s) − Cap, V(t)], so together they hold at most
// Cap + V(t) − V(s) <= Cap + rate × (t − s) + 1 unit.
//
// A reservation is an admission whose time is its wake, the first instant
// with V(wake) >= a + n: it moves z across (a, a+n] when it is made, and the
// caller counts as admitted at the wake. Both conditions hold then: a + n =
// V(wake) exactly (V grows by at most one unit per nanosecond), and a >= V(wake)
// − Cap because n <= Cap. Later reservations are stacked above it, and their
// wakes are fixed when they are made; sleepers are not moved.
//
// Cancelling a reservation before its wake removes its admission, but not the
// later reservations' wakes. Giving its interval back is sound only if that
// interval is the top of what z covers, z == a + n: nothing owns stream above
// it, so moving z back to a hands (a, a+n] to whoever comes next, and the
// clamp max(z, V(t) − Cap) still discards whatever of it has grown too old
// by then. If a later reservation is stacked above it, the interval lies
// below one that is owned; moving z back would hand out the later
// reservation's units a second time (it still wakes at its fixed time), and
// that is exactly the over-admission of refunding into a bucket whose
// refill the cap has since discarded. Such an interval is forfeited: the
// tokens are lost to everyone, as x/time/rate loses the tokens reserved after
// a cancelled reservation. Undoing stacked reservations in reverse order
// (the newest first) gives every one of them back.
//
// The tail test is exact on any state, stale or not, so the rule needs no
// clock reading at all: the wake test only decides whether the caller is
// still waiting (and so is not admitted) or already has its tokens.

// Refund applies the tail rule to a (tokens, last) state: it gives back a
// reservation of need units whose interval ends at end (the empty point the
// reservation left behind, EmptyPoint of the state it stored), as seen at
// elapsed time now. due reports that the reservation had already come due
// (V(at) >= end): the caller has its tokens and the state is unchanged. Not
// due, the state returned has the units back if the reservation is the tail,
// and is unchanged (the units forfeited) if a later reservation is stacked on
// it.
func (p *Params) Refund(tokens, last, now, need, end int64) (t, at int64, due bool) {
	bal, at := p.Refill(tokens, last, now)
	v := p.V(at)
	if v >= end {
		return tokens, last, true
	}
	if v-bal != end {
		return tokens, last, false // stacked on: forfeited
	}
	// bal = v − end < 0, so the refill above did not clamp, and the units
	// given back leave bal + need = v − (end − need) < need <= Cap: below the
	// capacity, since the reservation has not come due.
	return bal + need, at, false
}

// EmptyPoint returns the empty point z = V(last) − tokens of a (tokens,
// last) state: the stream value at which its balance is zero.
func (p *Params) EmptyPoint(tokens, last int64) int64 { return p.V(last) - tokens }
