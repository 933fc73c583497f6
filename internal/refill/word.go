package refill

import "sync/atomic"

// ReserveWord is the blocking step (see Reserve) on one word z that holds a
// bucket's empty point on the stream: its balance at elapsed time t is
// min(Cap, V(t) − z). That word is the whole of gcra's state, and
// shardedbucket's central word while it is dry; a caller that must wait
// moves z past the units it needs, taking the balance below zero.
//
// At the reading now it takes need units if they are there (wait 0), or
// returns Never, or a wait above limit without reserving. Otherwise it
// moves z from old to end, raises debtUntil to the wake (so that Tokens
// reports the debt until then), and returns the wait: the caller's undo
// swaps end back to old while the reservation is not due (V(now) < end),
// by the tail rule, since z holds exactly end only if nothing was taken or
// reserved after it.
func (p *Params) ReserveWord(z, debtUntil *atomic.Int64, now, need, limit int64) (wait, old, end int64) {
	v := p.V(now)
	for {
		old = z.Load()
		base := max(old, v-p.Cap) // refill beyond the capacity is discarded
		bal := v - base
		if bal >= need {
			if z.CompareAndSwap(old, base+need) {
				return 0, 0, 0
			}
			continue
		}
		wake, ok := p.Wake(bal, now, need)
		if !ok {
			return Never, 0, 0
		}
		if wake-now > limit {
			return wake - now, 0, 0
		}
		end = base + need // the reservation owns the stream interval (base, end]
		if !z.CompareAndSwap(old, end) {
			continue
		}
		for until := debtUntil.Load(); until < wake && !debtUntil.CompareAndSwap(until, wake); {
			until = debtUntil.Load()
		}
		return wake - now, old, end
	}
}
