package admitotel

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/cpu"
)

// Results, the index of a decision's admit.result.
const (
	allowed = iota
	denied
	failed
	nResults
)

var resultNames = [nResults]string{"allowed", "denied", "error"}

// maxPolicies bounds the policy names a wrapper counts separately, and
// maxPolicyName the bytes of each: a name kept is kept for the wrapper's
// life (and is a label value on every export), so what they hold is at
// most 64 KiB.
const (
	maxPolicies   = 64
	maxPolicyName = 1024
)

// slot is one processor's counters. Between pin and unpin the pinned
// goroutine is the only writer of its P's slot, so it adds without a locked
// instruction where plainAdds allows; the collection callback reads with
// atomic loads. The pad keeps two slots' counters off one cache line.
type slot struct {
	decisions [nResults]uint64 // unnamed policy only; named ones count in their policy's slots
	tokens    [nResults]uint64
	backend   uint64
	_         cpu.CacheLinePad
}

// policySlot is one processor's decision counts for one policy name.
type policySlot struct {
	decisions [nResults]uint64
	_         cpu.CacheLinePad
}

// policyCounts are one policy name's counters: one slot per P, and the
// last slot for Ps beyond them, added to atomically.
type policyCounts struct {
	name  string
	slots []policySlot
}

// counters holds a wrapper's per-processor counts: one slot per P id below
// len(slots)-1, and the last slot, always added to atomically, for P ids at
// or above that (GOMAXPROCS raised after the wrapper was built). It is safe
// for concurrent use and must not be copied after first use.
type counters struct {
	slots []slot

	// policies is a copy-on-write list: readers load it without a lock
	// and compare names; a new name is appended under mu to a fresh copy,
	// the one allocation per name.
	policies atomic.Pointer[[]*policyCounts]
	mu       sync.Mutex
}

func newCounters() *counters {
	n := max(runtime.GOMAXPROCS(0), runtime.NumCPU()) + 1
	c := &counters{slots: make([]slot, n)}
	c.policies.Store(new([]*policyCounts))
	return c
}

// add counts one call: its result, the tokens it asked for (negative counts
// as 0), whether it failed on the backend, and its deciding policy. The
// usual call (no policy, no backend error) adds to its P's slot in place;
// the rest go through addSlow. Limiter.AllowN repeats the in-place case
// in its own body: add does not inline, and the call costs a measurable
// part of the wrapper's budget.
func (c *counters) add(result int, n int64, backend bool, policy string) {
	p := pin()
	if plainAdds && p < uint(len(c.slots)-1) && policy == "" && !backend && n >= 0 {
		s := &c.slots[p]
		s.decisions[result]++
		s.tokens[result] = saturate(s.tokens[result], uint64(n))
		unpin()
		return
	}
	unpin()
	c.addSlow(result, n, backend, policy)
}

// saturate returns a+b, or the largest uint64 if that overflows. Token
// counts are sums of costs that callers choose, so they saturate instead of
// wrapping: a counter never decreases. A count stuck at the top is a
// counter that lost nothing it could report, since each is reported as an
// int64, clamped.
func saturate(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// addSaturating adds v to *p atomically, saturating as saturate does.
func addSaturating(p *uint64, v uint64) {
	for {
		old := atomic.LoadUint64(p)
		if atomic.CompareAndSwapUint64(p, old, saturate(old, v)) {
			return
		}
	}
}

func (c *counters) addSlow(result int, n int64, backend bool, policy string) {
	var pc *policyCounts
	if policy != "" {
		pc = c.policy(policy) // before pin: it may lock
	}
	tokens := uint64(max(n, 0))
	p := pin()
	if plainAdds && p < uint(len(c.slots)-1) {
		s := &c.slots[p]
		if pc != nil {
			pc.slots[p].decisions[result]++
		} else {
			s.decisions[result]++
		}
		s.tokens[result] = saturate(s.tokens[result], tokens)
		if backend {
			s.backend++
		}
		unpin()
		return
	}
	unpin()
	if plainAdds {
		p = min(p, uint(len(c.slots)-1)) // a processor past the slots: the shared last one
	} else {
		p %= uint(len(c.slots)) // a random draw (the purego build): any slot, all atomic
	}
	s := &c.slots[p]
	if pc != nil {
		atomic.AddUint64(&pc.slots[p].decisions[result], 1)
	} else {
		atomic.AddUint64(&s.decisions[result], 1)
	}
	if tokens > 0 {
		addSaturating(&s.tokens[result], tokens)
	}
	if backend {
		atomic.AddUint64(&s.backend, 1)
	}
}

// policy returns name's counters, creating them if there is room, else nil
// (the call then counts without a policy).
func (c *counters) policy(name string) *policyCounts {
	list := *c.policies.Load()
	for _, p := range list {
		if p.name == name {
			return p
		}
	}
	if len(name) > maxPolicyName {
		return nil
	}
	if len(list) >= maxPolicies {
		// Full, and the list never shrinks: no lock for a name that
		// will never be added (a client may send a new one each call).
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.policies.Load()
	for _, p := range old {
		if p.name == name {
			return p
		}
	}
	if len(old) >= maxPolicies {
		return nil
	}
	p := &policyCounts{name: name, slots: make([]policySlot, len(c.slots))}
	next := append(old[:len(old):len(old)], p)
	c.policies.Store(&next)
	return p
}

// totals is a sum over the slots, read by the collection callback.
type totals struct {
	decisions [nResults]int64
	tokens    [nResults]int64
	backend   int64
}

// sum reads every slot. Each counter only grows (token counts saturate),
// and the sums saturate too, so a sum read later is never below one read
// earlier, whatever adds run meanwhile: the reported counters are
// monotonic.
func (c *counters) sum() totals {
	var t totals
	var d, k [nResults]uint64
	var b uint64
	for i := range c.slots {
		s := &c.slots[i]
		for r := range nResults {
			d[r] = saturate(d[r], atomic.LoadUint64(&s.decisions[r]))
			k[r] = saturate(k[r], atomic.LoadUint64(&s.tokens[r]))
		}
		b = saturate(b, atomic.LoadUint64(&s.backend))
	}
	for r := range nResults {
		t.decisions[r], t.tokens[r] = clamp(d[r]), clamp(k[r])
	}
	t.backend = clamp(b)
	return t
}

func (p *policyCounts) sum() [nResults]int64 {
	var d [nResults]uint64
	for i := range p.slots {
		for r := range nResults {
			d[r] = saturate(d[r], atomic.LoadUint64(&p.slots[i].decisions[r]))
		}
	}
	var out [nResults]int64
	for r := range nResults {
		out[r] = clamp(d[r])
	}
	return out
}

// clamp converts a count for an Int64 instrument (2^63 decisions is
// centuries away, but a token count is a sum of caller-chosen n: it
// saturates there).
func clamp(v uint64) int64 { return int64(min(v, math.MaxInt64)) }
