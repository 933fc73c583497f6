package keyed

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
)

var _ admit.PolicyLimiter = (*Limiter)(nil)

// limParams is one limit's arithmetic and a copy of its Name, shared by
// every key and call that uses that (Name, Capacity, Rate); immutable. The
// copy is what a key stores as the Name of its state (limState.name), so
// that a key never keeps alive a larger buffer the caller's Name may point
// into (a request line, say), and keys that hold the same limit share one
// copy.
type limParams struct {
	name     string
	capacity int64
	rate     float64
	p        refill.Params
}

// newLimParams returns lim's arithmetic (lim already validated) with a
// copy of its Name; an error wraps admit.ErrInvalidConfig (a rate too
// small to represent next to the capacity).
func newLimParams(lim *admit.Limit) (*limParams, error) {
	p, err := refill.NewParams(lim.Capacity, lim.Rate)
	if err != nil {
		return nil, fmt.Errorf("limit %q: %w", lim.Name, err)
	}
	return &limParams{name: strings.Clone(lim.Name), capacity: lim.Capacity, rate: lim.Rate, p: p}, nil
}

// paramsCache is the number of slots of the limiter's cache of limParams:
// a call's limits are looked up there, without a lock, when a key does not
// already hold them, so that a steady set of tiers costs no big.Rat
// arithmetic, no copy of a Name and no allocation per call.
const paramsCache = 256

// paramsSlot is the cache slot of a limit: its Name, Capacity and Rate
// hashed (the Name under the limiter's secret seed, so that no caller can
// aim Names at one slot; a collision only costs the work the cache saves).
func (l *Limiter) paramsSlot(name string, capacity int64, rate float64) uint64 {
	h := l.hash(name) ^ uint64(capacity)*0x9e3779b97f4a7c15 ^ math.Float64bits(rate)
	return (h * 0xff51afd7ed558ccd) >> 56 // top 8 bits: paramsCache == 256
}

// params returns the arithmetic of lim (already validated), from the cache
// or built and cached; an error wraps admit.ErrInvalidConfig (see
// newLimParams).
func (l *Limiter) params(lim *admit.Limit) (*limParams, error) {
	slot := &l.pcache[l.paramsSlot(lim.Name, lim.Capacity, lim.Rate)]
	if lp := slot.Load(); lp != nil && lp.capacity == lim.Capacity && lp.rate == lim.Rate && lp.name == lim.Name {
		return lp, nil
	}
	lp, err := newLimParams(lim)
	if err != nil {
		return nil, err
	}
	slot.Store(lp) // a collision replaces the slot's limit: the cache only saves work
	return lp, nil
}

// multiEntry is a key that holds limits other than, or besides, the
// limiter's primary one: its entry (st is multiTag; at is its time word,
// whose time word carries only the reference bit until the key is removed)
// and, under mu, the latest time a call applied and one state word per
// limit Name it holds, at most maxNames of them. A key becomes one when a
// call first brings such limits (convert), and stays one until it is
// removed.
//
// All or nothing under concurrency is the lock: every call on the key
// decides and commits all its limits under mu, and a removal (a drop, which
// must see every limit full, or an eviction) marks st dead under mu too.
// Lock order: a shard's mu, then a multiEntry's; a call on the key holds
// only the latter.
type multiEntry struct {
	entry // first, so that a *entry whose st is multiTag converts to its multiEntry
	mu    sync.Mutex
	last  int64 // the latest elapsed time a call applied; under mu (see sync)
	lims  []limState
	// inl is where lims lives while the key holds at most inlineLimits
	// Names: in the entry's own allocation, so that a call reaches its
	// limits without following one more pointer to another line.
	inl [inlineLimits]limState
}

// inlineLimits is how many limit Names a key holds inside its multiEntry;
// more move lims to an array of its own (grow).
const inlineLimits = 3

// MaxNames is the most limits one call may bring (AllowLimits, NewLimits)
// and the most limit Names a key holds at once, so that a key's memory is
// bounded whatever Names its calls bring (see AllowLimits).
const MaxNames = 64

// limState is one (key, Name)'s bucket: z as for a single limit, on the
// stream of lp. name is lp.name when the state was stored (a carry-over
// replaces lp with another of the same Name), kept here so that a lookup
// reads no other line.
type limState struct {
	name string
	lp   *limParams
	z    int64
}

// maxBytesPerMultiKey bounds the heap bytes one held multi-limit key
// costs, its share of its shard's table aside: its entry with its key's
// form (168 + at most maxKeyBytes bytes: the 240-byte size class), the
// array its Names' states move to past inlineLimits (at most MaxNames
// states, 2048 bytes, which the allocator's 8-byte header for an object
// over 512 bytes with pointers puts in the 2304-byte class; the arrays
// before it are garbage), and for each Name, where no other key shares
// them, its limit's arithmetic and the copy of its Name (limParamsBytes).
const maxBytesPerMultiKey = 240 + 2304 + MaxNames*limParamsBytes

// limParamsBytes bounds a limParams with its copy of the Name: 72 bytes
// (the 80-byte class) and at most 128 (admit's bound on a Name's length).
const limParamsBytes = 80 + 128

// maxBytesParamsCache bounds what the limiter's cache of limits holds
// besides what keys hold: paramsCache limParams with their Names.
const maxBytesParamsCache = paramsCache * limParamsBytes

// newMulti returns a multiEntry for a copy of key (see newEntry).
func newMulti(key string) *multiEntry {
	m := withKey(key, func(m *multiEntry) *string { return &m.key })
	m.lims = m.inl[:0]
	return m
}

// asMulti returns the multiEntry e is the first field of. It requires that
// e's state is, or once was, multiTag: such entries are only ever allocated
// as multiEntries.
func asMulti(e *entry) *multiEntry { return (*multiEntry)(unsafe.Pointer(e)) }

// fullBy reports whether the limit's bucket is full at elapsed time t.
func (s *limState) fullBy(t int64) bool { return s.z <= s.lp.p.V(t)-s.lp.p.Cap }

// fullAt returns the elapsed time at which the limit's bucket is full.
func (s *limState) fullAt() int64 { return s.lp.p.Reach(0, s.z+s.lp.p.Cap) }

// full reports whether every limit m holds is full at t. Requires m.mu.
func (m *multiEntry) full(t int64) bool {
	for i := range m.lims {
		if !m.lims[i].fullBy(t) {
			return false
		}
	}
	return true
}

// dropMulti removes m if every limit it holds is full at t. It waits for
// m's lock: a key in use (a peek holds the lock for a moment) may be full,
// and passing it over would evict a live key or refuse a new one while a
// full bucket is held. (No caller holds a key's lock while it waits for a
// shard's, so this cannot deadlock: the hand runs before a new multi-limit
// entry, locked by its creator, is inserted.)
func (l *Limiter) dropMulti(m *multiEntry, t int64) bool {
	if !m.mu.TryLock() {
		l.test.keyBusy()
		m.mu.Lock()
	}
	defer m.mu.Unlock()
	if m.st.Load() != multiTag || !m.full(t) {
		return false
	}
	m.die()
	return true
}

// die marks m dead and leaves its latest time in its time word, where the
// removal reads it (shard.unlink). Requires m.mu.
func (m *multiEntry) die() {
	m.at.Store(uint64(m.last))
	m.st.Store(dead)
}

func (l *Limiter) killMulti(m *multiEntry) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.st.Load() != multiTag {
		return false
	}
	m.die()
	return true
}

// fullAtMulti is the latest of m's limits' full-at times.
func (l *Limiter) fullAtMulti(m *multiEntry) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fullAt()
}

// fullAt is the latest of m's limits' full-at times. Requires m.mu.
func (m *multiEntry) fullAt() int64 {
	at := int64(0)
	for i := range m.lims {
		at = max(at, m.lims[i].fullAt())
	}
	return at
}

// maxStackLimits is how many limits a call decides without allocating.
const maxStackLimits = 8

// AllowLimits decides key against limits, chosen per call, all or nothing
// (admit.PolicyLimiter's rules): n is taken from every limit, each limit's
// state lives per (key, Name), a Name the key does not hold starts full,
// and a limit whose Capacity or Rate differs from what the key holds under
// its Name carries the balance over (advanced to now at the old rate, then
// clamped to the new capacity; a bucket full under the old limit is full
// under the new one, as it would be had the limiter dropped it, so that a
// client's balance never depends on other keys' traffic). The limiter's
// own limits (New, NewLimits) are not applied; they share state with calls
// that name them.
//
// The Decision: allowed, Policy, Limit and Remaining are the limit's with
// the fewest whole tokens left (the first such in limits), ResetAfter the
// longest time until every limit is full. Denied, RetryAfter is the exact
// time until every limit holds n (the longest of the limits' waits, counted
// from the time the call applied), Policy and Limit are the limit's that
// needs the longest, Remaining the fewest whole tokens of any. Under
// RefuseNew a new key that finds no room is refused as by AllowN.
//
// Names per key: a key holds at most MaxNames limit Names, each stored as
// a copy (never the caller's string, which may point into a larger
// buffer). A Name is stored only when a call takes from it; an admission
// that brings Names the key does not hold first forgets the key's other
// Names that are full (exact: a full bucket equals a Name never used), and
// if the key would still hold more than MaxNames it is refused, taking
// nothing: Allowed false, an error wrapping admit.ErrUnavailable that names
// the bound, RetryAfter and ResetAfter the exact time until enough of the
// key's other Names are full, Policy and Limit those of the first limit the
// key does not hold. A call that waits that long is admitted, unless the
// key's other calls spent from those Names meanwhile. Peeks and denials
// store no Name and are never refused so. A server that derives Names
// from requests (per route, say) bounds its memory so: see the package
// doc's Cost for the bytes.
//
// Errors: no limits, more than MaxNames, two with one Name, or one that
// fails Validate or cannot be represented wrap admit.ErrInvalidConfig;
// n < 0 or n above some limit's Capacity wraps admit.ErrUnsatisfiable
// (Limit and Policy name that limit). Nothing is consumed on an error. Up
// to 8 limits per call are decided without allocating; more, up to
// MaxNames, are accepted.
//
// One limit equal to a New limiter's (same Name, Capacity and Rate) is
// decided by the lock-free path of AllowN. Other calls take the key's
// lock: a key's limits are committed together under it.
func (l *Limiter) AllowLimits(_ context.Context, key string, n int64, limits ...admit.Limit) (d admit.Decision, err error) {
	err = l.AllowLimitsInto(&d, key, n, limits...)
	return
}

// AllowLimitsInto is AllowLimits writing its Decision into *d (which it
// overwrites whole), for wrappers: see AllowNInto. d must not be nil.
func (l *Limiter) AllowLimitsInto(d *admit.Decision, key string, n int64, limits ...admit.Limit) error {
	if l.prim && len(limits) == 1 && limits[0] == l.limits[0] { // valid: equal to a valid limit
		return l.allowPrimary(d, key, n)
	}
	return l.allowLimits(d, key, n, limits, false, -1)
}

// callLimit is one limit's part of a call.
type callLimit struct {
	lp   *limParams
	z, v int64 // the limit's empty point after the call, and V(t)
	j    int32 // index in the key's lims, or −1
	ok   bool  // holds n
}

// allowLimits decides key against limits and writes every field of *d;
// checked says that the limits were validated. Every call is first tried
// on a held key that holds every one of limits, each under its own state,
// with the same Capacity and Rate, n within each: those limits were valid
// when stored and their Names are distinct, so the call is valid, and
// ValidateLimits is saved on the usual call. Anything else is checked
// first. (The clock is read before that: a bad call also reads it.) t is
// the call's reading when it has one already (AllowN's, which found the
// key multi-limit), or negative: a call reads the clock once, so that
// every reading it applies is the one it took first (see convert for the
// one exception).
func (l *Limiter) allowLimits(d *admit.Decision, key string, n int64, limits []admit.Limit, checked bool, t int64) error {
	var stack [maxStackLimits]callLimit
	cl := stack[:0]
	if len(limits) > maxStackLimits {
		cl = make([]callLimit, 0, len(limits))
	}
	cl = cl[:len(limits)]
	var buf [digestBytes]byte
	key = l.form(key, &buf)
	h := l.hash(key)
	v := &l.views[l.shardIndex(h)]
	e := v.find(l.hx(h), tagOf(h), key, l.test)
	if t < 0 {
		t = l.clk.Now()
	}
	// The usual call: its stored states carry their arithmetic, so that no
	// limit's is looked up. decideMulti gives up, changing nothing, on a
	// limit the key does not hold so.
	if e != nil && e.st.Load() == multiTag && n >= 0 && len(limits) > 0 {
		m := asMulti(e)
		m.mu.Lock()
		if m.st.Load() == multiTag {
			// held brings no new Name: room is 0.
			if tc, _, ok := l.decideMulti(m, t, n, limits, cl, true, nil); ok {
				m.mu.Unlock()
				l.multiDecision(d, tc, n, limits, cl)
				return nil
			}
		}
		m.mu.Unlock()
		clear(cl)
	}
	if !checked {
		if err := validateLimits(limits); err != nil {
			setDecision(d, false, 0, 0, 0, 0, "")
			return err
		}
	}
	if err := checkN(d, n, limits); err != nil {
		return err
	}
	// Every limit's arithmetic, before anything is stored, so that an
	// unrepresentable one consumes nothing.
	for i := range limits {
		lp, err := l.params(&limits[i])
		if err != nil {
			setDecision(d, false, 0, 0, 0, 0, "")
			return err
		}
		cl[i].lp = lp
	}
	for {
		m, locked, w, ok := l.multiFor(key, h, n, t)
		if !ok { // refused
			setDecision(d, false, limits[0].Capacity, 0, w, w, limits[0].Name)
			return l.errFull
		}
		if m == nil { // a peek at a key not held: every limit full
			l.fullDecision(d, limits)
			return nil
		}
		if !locked {
			m.mu.Lock()
		}
		if m.st.Load() != multiTag { // removed since it was found
			m.mu.Unlock()
			continue
		}
		tc, room, ok := l.decideMulti(m, t, n, limits, cl, false, nil) // every cl[i].lp is set
		if !ok {
			// A carry-over, which may move the key's full-at time earlier:
			// the shard's floor must follow before any call sees the new
			// state, so decide again under the shard's lock (lock order:
			// shard, then key).
			m.mu.Unlock()
			s := &l.shards[l.shardIndex(h)]
			s.mu.Lock()
			m.mu.Lock()
			if m.st.Load() != multiTag {
				m.mu.Unlock()
				s.mu.Unlock()
				continue
			}
			tc, room, _ = l.decideMulti(m, t, n, limits, cl, false, s)
			s.mu.Unlock()
		}
		m.mu.Unlock()
		if room != 0 {
			return l.noNames(d, tc, room, limits, cl)
		}
		l.multiDecision(d, tc, n, limits, cl)
		return nil
	}
}

// decideMulti decides n against limits on m at the later of t and m's time,
// commits all or nothing, and returns the time applied. cl[i].lp holds
// limits[i]'s arithmetic, or is nil for a limit m holds under its Name with
// the same Capacity and Rate (whose stored arithmetic serves); for a nil
// one m does not hold so, decideMulti reports false before it changes
// anything. held (a call not yet checked; n >= 0, limits not empty) decides
// only if m holds every limit, each under a different one of its states,
// with the same Capacity and Rate, and n is within every Capacity;
// otherwise it reports false, having changed nothing. A carry-over (a limit
// m holds under its Name with another Capacity or Rate) may move m's
// full-at time earlier, so it is decided only by a caller that holds m's
// shard's lock, s, and lowers s's floor to follow; with s nil, decideMulti
// reports false before it changes anything. Requires m.mu.
//
// An admission that brings Names new to m stores them (a Name is stored
// only when taken from: a full bucket equals an absent one), after
// dropping m's other Names that are full at the time applied (exact, for
// the same reason). If m would then hold more than MaxNames, it commits
// nothing and returns in room the elapsed time at which enough of m's
// other Names are full to make room (after the time applied).
func (l *Limiter) decideMulti(m *multiEntry, t, n int64, limits []admit.Limit, cl []callLimit, held bool, s *shard) (tc, room int64, ok bool) {
	t = max(t, m.last)
	allowed := true
	var used uint64 // the states matched, which for held must differ
	for i := range limits {
		lim := &limits[i]
		c := &cl[i]
		c.j = -1
		if i < len(m.lims) && m.lims[i].name == lim.Name {
			c.j = int32(i) // a key called with the same limits holds them in the same order
		} else {
			for j := range m.lims {
				if m.lims[j].name == lim.Name {
					c.j = int32(j)
					break
				}
			}
		}
		if c.j >= 0 {
			// m holds at most MaxNames (64) states: c.j < 64. Stored
			// Names are valid and distinct, so for held, limits matched
			// to distinct states have valid, distinct Names.
			if held && used&(1<<c.j) != 0 {
				return 0, 0, false
			}
			used |= 1 << c.j
		}
		if held && (c.j < 0 || n > lim.Capacity) {
			return 0, 0, false
		}
		if c.j >= 0 && m.lims[c.j].lp.capacity == lim.Capacity && m.lims[c.j].lp.rate == lim.Rate {
			c.lp = m.lims[c.j].lp // the same limit, perhaps another *limParams from a cache collision
		} else if c.lp == nil || c.j >= 0 && s == nil {
			return 0, 0, false // nothing changed yet: the first loop only reads m
		}
		p := &c.lp.p
		c.v = p.V(t)
		full := c.v - p.Cap
		switch {
		case c.j < 0:
			c.z = full
		case m.lims[c.j].lp == c.lp:
			c.z = max(m.lims[c.j].z, full)
		default:
			c.z = c.v - carry(&m.lims[c.j], t, p)
		}
		c.ok = c.v-c.z >= p.Units(n)
		allowed = allowed && c.ok
	}
	if allowed && n > 0 && bits.OnesCount64(used) < len(limits) {
		// New Names to store: first forget the full ones m holds besides
		// the call's. That never lowers m's full-at time below the call's
		// (another Name is not full, or the new ones are not after the
		// call), so the shard's floor stays a bound.
		used = m.dropFull(t, used, cl)
		if k := len(m.lims) + len(limits) - bits.OnesCount64(used); k > MaxNames {
			m.last = t // the Names dropped were full at t: no call may apply less
			return t, m.roomAt(used, k-MaxNames), true
		}
	}
	for i := range cl {
		c := &cl[i]
		if allowed && n > 0 {
			c.z += c.lp.p.Units(n)
		}
		switch {
		case c.j >= 0:
			st := &m.lims[c.j]
			if st.lp != c.lp {
				// A changed Capacity or Rate: the state's Name becomes the
				// new limit's copy too, so that the old limit's copy is not
				// kept beside it (a key's bytes count one copy a Name).
				st.lp, st.name = c.lp, c.lp.name
			}
			st.z = c.z
		case allowed && n > 0:
			// A Name new to the key, stored with the copy of its Name that
			// its limParams holds.
			m.add(limState{name: c.lp.name, lp: c.lp, z: c.z})
			c.j = int32(len(m.lims) - 1)
		}
	}
	m.last = t // under mu: the time only moves forward
	if a := m.at.Load(); a&refBit == 0 {
		m.at.CompareAndSwap(a, a|refBit) // the CLOCK bit, as take sets it
	}
	if s != nil {
		// After a carry-over: the floor stays a lower bound of every
		// full-at time in the shard (see shardState.floor).
		if at := m.fullAt(); at < s.floor.Load() {
			s.floor.Store(at)
			s.minE = &m.entry
		}
	}
	return t, 0, true
}

// dropFull forgets the Names m holds that are full at t, except those in
// used (the call's, by index), keeping the others in order, and returns
// used and the call's indices (cl[i].j) for the new positions. Requires
// m.mu.
func (m *multiEntry) dropFull(t int64, used uint64, cl []callLimit) uint64 {
	var at [MaxNames]int8 // old index → new
	k := 0
	for j := range m.lims {
		st := &m.lims[j]
		if used&(1<<j) == 0 && st.fullBy(t) {
			at[j] = -1
			continue
		}
		at[j] = int8(k)
		m.lims[k] = *st
		k++
	}
	clear(m.lims[k:]) // no stale pointers to Names and limParams
	m.lims = m.lims[:k]
	used = 0
	for i := range cl {
		if c := &cl[i]; c.j >= 0 {
			c.j = int32(at[c.j])
			used |= 1 << c.j
		}
	}
	return used
}

// roomAt returns the elapsed time at which k of the Names m holds outside
// used are full: the k-th earliest of their full-at times. Requires m.mu
// and that many such Names.
func (m *multiEntry) roomAt(used uint64, k int) int64 {
	var at [MaxNames]int64
	n := 0
	for j := range m.lims {
		if used&(1<<j) == 0 {
			at[n] = m.lims[j].fullAt()
			n++
		}
	}
	slices.Sort(at[:n])
	return at[k-1]
}

// add appends st to m's Names, growing their array by doubling up to
// MaxNames (append's growth would pass it), so that a key's array holds at
// most MaxNames states. Requires m.mu and fewer than MaxNames Names.
func (m *multiEntry) add(st limState) {
	if len(m.lims) == cap(m.lims) {
		a := make([]limState, len(m.lims), min(2*cap(m.lims), MaxNames))
		copy(a, m.lims)
		if cap(m.lims) == inlineLimits {
			// The states left the inline array: cleared, so that it
			// keeps no params or Name alive after their Name is dropped
			// (the key's bytes bound counts MaxNames states, not more).
			clear(m.inl[:])
		}
		m.lims = a
	}
	m.lims = append(m.lims, st)
}

// validateLimits is admit.ValidateLimits with keyed's own bound: at most
// MaxNames limits.
func validateLimits(limits []admit.Limit) error {
	if err := admit.ValidateLimits(limits); err != nil {
		return err
	}
	if len(limits) > MaxNames {
		return fmt.Errorf("%w: %d limits: keyed takes at most MaxNames (%d)", admit.ErrInvalidConfig, len(limits), MaxNames)
	}
	return nil
}

// checkN reports n < 0 or n above a limit's Capacity as an error wrapping
// admit.ErrUnsatisfiable, with that limit's Decision in *d.
func checkN(d *admit.Decision, n int64, limits []admit.Limit) error {
	for i := range limits {
		if n < 0 || n > limits[i].Capacity {
			setDecision(d, false, limits[i].Capacity, 0, 0, 0, limits[i].Name)
			return fmt.Errorf("%w: n=%d is outside [0, capacity %d] of limit %q", admit.ErrUnsatisfiable, n, limits[i].Capacity, limits[i].Name)
		}
	}
	return nil
}

// carry returns the balance, in p's units, that old's bucket carries into a
// limit of the same Name with arithmetic p at time t: a bucket full at t is
// full under the new limit too (a full bucket equals one never used, which
// the limiter may have dropped by then); otherwise the balance advanced to t
// at the old rate, clamped to the new capacity (rounded down when p's units
// are coarser).
func carry(old *limState, t int64, p *refill.Params) int64 {
	op := &old.lp.p
	bal := min(max(op.V(t)-old.z, 0), op.Cap)
	if bal == op.Cap {
		return p.Cap
	}
	switch {
	case op.Shift > p.Shift:
		bal >>= op.Shift - p.Shift
	case op.Shift < p.Shift:
		d := p.Shift - op.Shift
		if bal > p.Cap>>d {
			return p.Cap
		}
		bal <<= d
	}
	return min(bal, p.Cap)
}

// multiDecision writes the Decision of a call decided at t (rule 4 of
// admit.PolicyLimiter) into *d.
func (l *Limiter) multiDecision(d *admit.Decision, t, n int64, limits []admit.Limit, cl []callLimit) {
	allowed := true
	for i := range cl {
		allowed = allowed && cl[i].ok
	}
	remaining := int64(math.MaxInt64)
	fewest, longest := -1, -1
	var wait, reset time.Duration
	for i := range cl {
		c := &cl[i]
		p := &c.lp.p
		rem := max(c.v-c.z, 0) >> p.Shift
		if rem < remaining {
			remaining, fewest = rem, i
		}
		if c.z > c.v-p.Cap {
			reset = max(reset, l.until(t, p.Reach(t, c.z+p.Cap)))
		}
		if !c.ok {
			if w := l.until(t, p.Reach(t, c.z+p.Units(n))); longest < 0 || w > wait {
				wait, longest = w, i
			}
		}
	}
	pick := fewest
	var retry time.Duration
	if !allowed {
		retry, pick = wait, longest
	}
	setDecision(d, allowed, limits[pick].Capacity, remaining, retry, reset, limits[pick].Name)
}

// fullDecision writes the Decision of a peek at a key not held into *d.
func (l *Limiter) fullDecision(d *admit.Decision, limits []admit.Limit) {
	setDecision(d, true, 0, math.MaxInt64, 0, 0, "")
	for i := range limits {
		if limits[i].Capacity < d.Remaining {
			d.Remaining, d.Limit, d.Policy = limits[i].Capacity, limits[i].Capacity, limits[i].Name
		}
	}
}

// noNames writes into *d the refusal of an admission that would have
// left the key holding more than MaxNames Names not full (decided at t),
// and returns its error: Allowed false, RetryAfter and ResetAfter the wait
// until enough of the key's other Names are full (room, an elapsed time
// after t), Policy and Limit those of the first limit the key does not
// hold. A call that waits that long finds the room, unless the key's
// other calls spent from those Names meanwhile.
func (l *Limiter) noNames(d *admit.Decision, t, room int64, limits []admit.Limit, cl []callLimit) error {
	i := 0
	for cl[i].j >= 0 {
		i++
	}
	w := l.until(t, room)
	setDecision(d, false, limits[i].Capacity, 0, w, w, limits[i].Name)
	return fmt.Errorf("%w: keyed: limit %q is new to the key, which holds MaxNames (%d) limit Names not full", admit.ErrUnavailable, limits[i].Name, MaxNames)
}

// multiFor returns key's multiEntry (hash h), converting its single-limit
// entry or inserting a new one as needed, making room first at the bound.
// It returns nil for a peek (n == 0) at a key not held, and false with the
// wait until room comes when RefuseNew refuses the key, counted from the
// time a new bucket would start at (see slow). The
// caller locks the entry, unless locked says it is (a new entry is locked
// before it is published, so that it is never seen without a limit), and
// checks that it is still live.
func (l *Limiter) multiFor(key string, h uint64, n, t int64) (m *multiEntry, locked bool, wait time.Duration, ok bool) {
	s := &l.shards[l.shardIndex(h)]
	if e := l.views[l.shardIndex(h)].find(l.hx(h), tagOf(h), key, l.test); e != nil && e.st.Load() == multiTag {
		return asMulti(e), false, 0, true
	}
	for {
		s.mu.Lock()
		var tb *table
		if tb = s.tab.Load(); tb != nil {
			if e := tb.find(l.hx(h), tagOf(h), key, l.test); e != nil {
				m := l.convert(s, tb, h, e)
				s.mu.Unlock()
				return m, false, 0, true
			}
		}
		if n == 0 {
			s.absentAt = max(s.absentAt, t) // see slow
			s.mu.Unlock()
			return nil, false, 0, true
		}
		t := max(t, s.absentAt) // see slow
		if l.reserve() {
			t = s.handBefore(l, t)
			m := newMulti(key)
			m.st.Store(multiTag)
			m.last = t
			m.mu.Lock() // lock order: shard, then key
			// No limit held yet: full-at is now, a lower bound of the floor.
			s.insert(l, &m.entry, h, t)
			s.mu.Unlock()
			return m, true, 0, true
		}
		s.mu.Unlock()
		if at, ok := l.makeRoom(int(l.shardIndex(h)), t); !ok {
			s.mu.Lock()
			s.refusals++
			s.mu.Unlock()
			return nil, false, l.until(t, at), false
		}
	}
}

// convert returns e as a multiEntry: e itself if it is one, or a new one
// that takes over e's primary-limit state and replaces e in the table.
// Requires s.mu. The CAS to moved makes every later call on the old entry
// look again under the lock, where it finds the new one; every call that
// CASed before is in the state carried over.
//
// The new entry's time must be no earlier than any the key applied: the
// Names the converting call brings start (or carry over) at it, and a
// later call with an older reading would refill them over time the key
// had already seen: retiredTime, read after the CAS to moved. On a clock
// that runs backwards (which admit.Clock asks not to) that is only a lower
// bound, and each Name the conversion starts or carries over may refill
// over time the key had seen: at most one burst.
func (l *Limiter) convert(s *shard, tb *table, h uint64, e *entry) *multiEntry {
	for {
		st := e.st.Load()
		if st == multiTag {
			return asMulti(e)
		}
		if !e.st.CompareAndSwap(st, moved) {
			continue
		}
		m := newMulti(e.key)
		m.add(limState{name: l.lps[0].name, lp: l.lps[0], z: dec(st)})
		m.st.Store(multiTag)
		a := e.at.Load()
		m.at.Store(a & refBit)
		// The key's latest time, which its words alone do not hold.
		m.last = l.retiredTime(a, st)
		// The same key in the same slot: its tag stays.
		tb.slots[tb.slot(l.hx(h), e)].Store(&m.entry)
		return m
	}
}
