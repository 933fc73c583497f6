// Package tsc implements a reading of the runtime's monotonic clock (what
// time.Since reads) taken from the processor's timestamp counter, for the
// hot paths that read the clock on every call (keyed).
//
// # Why
//
// On the project's machine (a 2-core AMD EPYC KVM guest, Go 1.26)
// time.Since costs 27–30 ns: the kernel's vDSO reads the counter with
// RDTSCP, which waits for every earlier instruction to finish, and Go
// switches to the system stack around the call. A reading here costs
// 10.6 ns, of which the unordered RDTSC is 10.4 (BenchmarkNow). A keyed
// call on a held key was about 60 ns, so the clock was close to half of it;
// with this clock it is about 33 (docs/benchmarks.md).
//
// # How
//
// The clock keeps one anchor: a counter value x₀, the monotonic reading m₀
// taken just before it, and a scale k (nanoseconds per tick, 32.32 fixed
// point). A reading x within span ticks of x₀ (32 µs) is
//
//	m₀ + ⌊(x − x₀)·k / 2^32⌋
//
// and any other reading (past the span, or before the anchor) is the
// monotonic clock's own; the first such caller that finds the anchor's lock
// free re-anchors at the present, writing the new anchor beside the one in
// use and then switching to it, so that readers keep extrapolating from the
// old one meanwhile. No goroutine runs in the background: the callers that
// step past a span pay for the next anchor (three clock reads, about 100
// ns, once per 32 µs of calls: well under 1 ns a call in a busy loop).
//
// k is a lower bound of the counter's rate against the monotonic clock
// over a baseline (the monotonic clock advanced at least m − b.mb while
// the counter advanced x − b.x, each monotonic reading taken on the near
// side of its counter read), lowered by 2^-8 (3906 ppm). The baseline is
// at least 100 µs and long enough that its ends' uncertainty is at most
// 2^-8 of it; while calls keep coming it is 256 to 512 ms old, so that k
// follows the frequency corrections NTP makes to the monotonic clock.
// After idle time (no anchor for 256 ms by the counter, or 512 ms by the
// monotonic clock; a suspend stops only the latter) it is started afresh.
// Until a baseline is long enough (about 100 µs after Enable or after idle
// time), every reading is the monotonic clock's own.
//
// # What a reading promises
//
// In steady state a reading is never ahead of the monotonic clock and at
// most about 0.45 µs behind it (maxPair, the widest window allowed between
// an anchor's two monotonic reads, plus 2·32 µs·2^-8 of drift; about 85 ns
// on average on the Intel machine, 52 with spans of 16 µs). A reading behind
// the true value is one taken a little earlier, which every limiter here
// already treats as a stale reading that adds nothing. Readings are not
// monotonic, even in one goroutine: one that reads the monotonic clock
// itself (past a span) can be followed by an extrapolated one up to the lag
// earlier.
//
// Why never ahead: m₀ is read before x₀ (the anchor's counter read is
// ordered, RDTSCP), so the monotonic clock at x₀ is at least m₀, and from
// there the extrapolation advances at k. That holds under three
// assumptions: every core's counter agrees with the one the kernel's
// clock last read (the kernel checks at boot that they are synchronised,
// and uses the counter as its clocksource only then); the counter's rate
// does not change (invariant TSC; a VM migration without TSC scaling
// breaks it); and the monotonic clock's rate against the counter does not
// fall more than 3906 ppm below its average over the baseline. NTP's
// frequency correction is capped at 500 ppm, but the kernel's phase-offset
// slew and chrony's tick adjustments can exceed 3906 ppm for a while
// after a large offset is found.
//
// When an assumption fails, a reading can be ahead by at most a span times
// the excess rate (32 µs × 8% ≈ 2.6 µs for a clock slewed 8% slower), and
// the next re-anchoring finds it: it checks the old anchor's extrapolation
// to the new counter value against a monotonic reading taken after it,
// and if it is ahead, the clock turns itself off for good: every later
// reading is the monotonic clock's own. The check cannot
// see a reading ahead by less than the time between the last reading
// served and the re-anchoring (under load, a few tens of nanoseconds),
// and after more than four spans without re-anchoring it checks only the
// end of the old span, so that idle time is not blamed.
//
// # When it is used
//
// Only on linux/amd64 without the admit_purego or admit_nocounter build tag
// (the latter turns off the counter and nothing else), on a processor
// whose counter runs at a constant rate in every power state (CPUID's
// invariant TSC bit) and has RDTSCP, in a process allowed to read it
// (prctl PR_GET_TSC), and only if the kernel's clocksource is "tsc" when
// Enable first runs. That is checked once: a kernel that later switches
// clocksource (its watchdog found the counter unstable) is caught, if at
// all, by the re-anchoring check. Elsewhere Enable reports false and
// callers read the monotonic clock themselves.
package tsc

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// spanNS is how long, in nanoseconds, one anchor serves. Longer spans
	// renew the anchor less often, and each renewal moves the lines every
	// reading loads between the cores once; they also widen the lag (2·span
	// of drift at 2^-biasShift) and how far ahead a failed assumption can
	// take a reading (a span times the excess rate). 32 µs against 16: a
	// keyed call 0.4–0.9 ns faster at two cores (of 23.6–23.9), the average
	// lag about 30 ns longer (docs/benchmarks.md).
	spanNS = 32_000
	// biasShift lowers the scale by 2^-biasShift, for changes in the
	// monotonic clock's rate since the baseline.
	biasShift = 8
	// minBase is the shortest baseline the scale is measured over; the
	// baseline must also be long enough that the uncertainty of its two
	// ends is at most 2^-biasShift of it.
	minBase = 100 * int64(time.Microsecond)
	// rebase: once the process has run that long, the baseline is from
	// rebase to 2·rebase old, so that the scale follows the kernel's NTP
	// frequency corrections.
	rebase = 256 * int64(time.Millisecond)
	// maxPair is the widest [m, mb] a point may have to become an anchor
	// or a baseline: a goroutine descheduled between the reads makes one
	// wider, and is not used.
	maxPair = 200
)

// point is a counter value x and monotonic readings taken just before (m)
// and just after (mb) it: the monotonic clock at x lies in [m, mb].
type point struct {
	x     uint64
	m, mb int64
}

// anchor is one published anchor, written as a seqlock under the Clock's
// mu: seq is odd while the fields change, and a reader that sees it odd
// or changed does not use what it read. span == 0 means no anchor (not
// calibrated yet, or off). It fills one cache line (Clock keeps it
// line-aligned), so that writing one slot never touches the line of the
// other.
type anchor struct {
	seq  atomic.Uint64
	x0   atomic.Uint64
	m0   atomic.Int64
	k    atomic.Uint64
	span atomic.Uint64
	_    [cacheLine - 40]byte
}

// cacheLine is the line size of the processors the counter is used on
// (amd64, where it is cpu.CacheLinePad's size: TestLayout checks). It is a
// constant rather than that size because elsewhere the pad may be empty
// (js/wasm), and the layout then only needs to compile.
const cacheLine = 64

// Clock is the anchor and its upkeep. The package uses one, std, for the
// whole process; tests build others on fake counters. A Clock is safe for
// concurrent use and must not be copied after first use. Its zero value is
// not usable: see newClock.
//
// Every reading loads cur and the slot it names; only a re-anchoring (once
// a span, about 32 µs) writes. It writes the slot readers are not using,
// then flips cur, so a core that keeps reading misses twice per anchor (on
// cur's line and on the new slot's), however many stores the anchor takes,
// and the lock, the baselines and ready, written while anchoring, are on
// lines no extrapolated reading loads (a reading past the span loads them
// in slow). With one slot, the anchor's stores interleaved with the other
// core's reads of the same line moved it back and forth several times per
// anchor: at two cores that cost a keyed call 1.1–1.7 ns of its 24 on the
// Intel machine (docs/benchmarks.md). A Clock is 320 bytes, a size class
// whose objects start on a line; TestLayout checks both.
type Clock struct {
	slots [2]anchor
	// cur's low bit is the slot in use; it changes only under mu, after
	// the other slot is written. tick and mono are set once: the line is
	// written once per anchor.
	cur  atomic.Uint64
	tick func() uint64 // the counter, ordered after earlier loads (RDTSCP)
	mono func() int64  // the monotonic clock
	_    [cacheLine - 24]byte

	mu     sync.Mutex
	b0, b1 point // the scale's baselines, b0 older; require mu
	// ready is the monotonic reading before which calibration cannot
	// succeed: a reading before it skips the lock.
	ready atomic.Int64
	off   atomic.Bool                        // set once, never cleared
	_     [2*cacheLine - 8 - 48 - 8 - 4]byte // mu, b0 and b1, ready, off: to 5 lines
}

// newClock returns a Clock over the counter tick and the monotonic clock
// mono, calibrating from now.
func newClock(tick func() uint64, mono func() int64) *Clock {
	c := &Clock{tick: tick, mono: mono}
	p := c.point()
	for i := 0; i < 8 && p.mb-p.m > maxPair; i++ {
		p = c.point() // descheduled between the reads: a wide first point would delay calibration
	}
	c.b0, c.b1 = p, p
	c.ready.Store(p.m + minBase)
	return c
}

func (c *Clock) point() point {
	m := c.mono()
	x := c.tick()
	return point{x: x, m: m, mb: c.mono()}
}

// live returns the slot readings use now.
func (c *Clock) live() *anchor { return &c.slots[c.cur.Load()&1] }

// at returns the reading for counter value x: the anchor's extrapolation
// if x is within its span, else the monotonic clock's own reading.
func (c *Clock) at(x uint64) int64 {
	a := c.live()
	s := a.seq.Load()
	x0, m0, k, span := a.x0.Load(), a.m0.Load(), a.k.Load(), a.span.Load()
	// d·k < span·k <= spanNS·2^32 < 2^47: no overflow. A slot rewritten
	// since cur was read (two publishes since: this reader was descheduled,
	// or the clock was turned off) shows a changed seq.
	if d := x - x0; d < span && s&1 == 0 && a.seq.Load() == s {
		return m0 + int64(d*k>>32)
	}
	return c.slow()
}

// slow reads the monotonic clock and re-anchors if it can take the lock at
// once; a caller that cannot goes on with its reading.
func (c *Clock) slow() int64 {
	m := c.mono()
	if m < c.ready.Load() || c.off.Load() || !c.mu.TryLock() {
		return m
	}
	c.anchor()
	c.mu.Unlock()
	return m
}

// anchor checks the current anchor against the monotonic clock and
// replaces it with one at the present. Requires mu.
//
// The new anchor is (p.x, p.m): the monotonic clock at p.x is at least
// p.m. Its scale is a lower bound of the counter's rate over the
// baseline b0 → p (the monotonic clock advanced at least p.m − b0.mb
// while the counter advanced p.x − b0.x), lowered by 2^-biasShift.
func (c *Clock) anchor() {
	live := c.live()
	if c.off.Load() {
		return // a caller that found it on before another turned it off
	}
	p := c.point()
	if p.mb-p.m > maxPair {
		c.ready.Store(p.m + minBase) // try again a little later
		return
	}
	idle := p.m-c.b1.m >= 2*rebase // by the monotonic clock
	if span := live.span.Load(); span != 0 {
		// The monotonic clock at p.x is at most p.mb. If the old anchor's
		// extrapolation to p.x is ahead of that, the monotonic clock ran
		// slower against the counter than the scale allows somewhere in
		// the span, and readings served in it may have been ahead: the
		// assumption failed. A gap of more than 4 spans since the anchor
		// is idle time, in which no reading was served (suspend stops
		// the monotonic clock, not the counter); the anchor is then only
		// checked at the end of its span, which proves a reading served
		// ahead, but cannot see one ahead by less than the idle time.
		if d := int64(p.x - live.x0.Load()); d > 0 {
			// By the counter: a suspend stops the monotonic clock only.
			idle = idle || uint64(d)/span >= uint64(rebase/spanNS)
			if uint64(d) > 4*span {
				d = int64(span)
			}
			// d·k <= 4·span·k < 2^49.
			if ext := int64(uint64(d) * live.k.Load() >> 32); ext > p.mb-live.m0.Load() {
				c.turnOff()
				return
			}
		}
	}
	if idle {
		// No anchor for rebase by the counter, or for 2·rebase by the
		// monotonic clock: idle, or suspended. The baselines may span a
		// change in the counter's rate against the monotonic clock;
		// calibrate afresh from here.
		c.b0, c.b1 = p, p
		c.publish(0, 0, 0, 0)
		c.ready.Store(p.m + minBase)
		return
	}
	dx := p.x - c.b0.x
	lo, hi := p.m-c.b0.mb, p.mb-c.b0.m // the monotonic clock's advance lies in [lo, hi]
	if int64(dx) <= 0 {
		c.turnOff() // the counter did not advance: not a clock
		return
	}
	if lo < minBase || (hi-lo)<<biasShift > lo {
		c.ready.Store(p.m + minBase) // too short or too uncertain yet
		return
	}
	// A rate of 2^32 ns per tick or more is no counter of ours.
	if uint64(lo)>>32 >= dx {
		c.turnOff()
		return
	}
	k, _ := bits.Div64(uint64(lo)>>32, uint64(lo)<<32, dx)
	k -= k >> biasShift
	if k == 0 {
		c.turnOff()
		return
	}
	c.publish(p.x, p.m, k, (uint64(spanNS)<<32)/k)
	if p.m-c.b1.m >= rebase {
		c.b0, c.b1 = c.b1, p
	}
}

// publish writes the slot not in use and then makes it the one in use.
// Requires mu. A reader still on the slot written here (it read cur before
// the publish before this one) sees its seq change and does not use it.
func (c *Clock) publish(x0 uint64, m0 int64, k, span uint64) {
	n := c.cur.Load() + 1
	a := &c.slots[n&1]
	a.seq.Add(1)
	a.x0.Store(x0)
	a.m0.Store(m0)
	a.k.Store(k)
	a.span.Store(span)
	a.seq.Add(1)
	c.cur.Store(n)
}

// turnOff makes every later reading the monotonic clock's. Requires mu.
// Both slots are emptied: the one in use until now holds the anchor found
// ahead, and a reader that loaded cur before the first publish would
// still extrapolate from it.
func (c *Clock) turnOff() {
	c.off.Store(true)
	c.publish(0, 0, 0, 0)
	c.publish(0, 0, 0, 0)
}

var (
	std     *Clock // nil where the counter is not used
	stdOnce sync.Once
)

// Enable starts the process's clock if this machine supports it (see the
// package doc) and reports whether Now reads the counter. It reads a file
// and executes CPUID on its first call, so constructors call it, not hot
// paths.
func Enable() bool {
	stdOnce.Do(func() {
		if supported() {
			std = newClock(rdtscp, monotonic)
		}
	})
	return std != nil
}

// Mono returns the monotonic clock's own reading on Now's scale (what Now
// extrapolates from): the kernel's ordered read, for a caller that needs a
// reading no earlier than any Now taken before it, in any goroutine. It is
// also the system clock of every limiter built on internal/refill where
// Now is not used (see mono.go).
func Mono() int64 { return monotonic() }

// Now returns the monotonic clock in nanoseconds from an arbitrary origin
// fixed for the process, read through the counter. It may be called only
// after Enable has reported true.
func Now() int64 { return std.at(rdtsc()) }
