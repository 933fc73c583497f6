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
// call on a held key was about 60 ns, so the clock was close to half of it.
//
// # How
//
// The clock keeps one anchor: a counter value x₀, the monotonic reading m₀
// taken just before it, and a scale k (nanoseconds per tick, 32.32 fixed
// point). A reading x within span ticks of x₀ (32 µs) is
//
//	m₀ + ⌊(x − x₀)·k / 2^32⌋
//
// and any other reading (past the span, before the anchor, or while the
// anchor is being replaced) is the monotonic clock's own; the first such
// caller that finds the anchor's lock free re-anchors at the present. No
// goroutine runs in the background: the callers that step past a span pay
// for the next anchor (three clock reads, about 100 ns, once per 32 µs of
// calls).
//
// k is a lower bound of the counter's rate against the monotonic clock
// over a baseline (the monotonic clock advanced at least m − b.mb while
// the counter advanced x − b.x, each monotonic reading taken on the near
// side of its counter read), lowered by 2^-10 (977 ppm). The baseline is at
// least 100 µs and long enough that its ends' uncertainty is at most 2^-10
// of it; once the process has run a while it is 256 to 512 ms old, so that
// k follows the frequency corrections NTP makes to the monotonic clock.
// Until the first baseline is long enough (about the first 100 µs after
// Enable), every reading is the monotonic clock's own.
//
// # What a reading promises
//
// A reading is never ahead of the monotonic clock, and at most about
// 0.26 µs behind it (maxPair, the widest window between an anchor's two
// monotonic reads, plus 2·32 µs·2^-10 of drift; 30–50 ns on average on the
// project's machine). Why never ahead: m₀ is read before x₀ (the anchor's
// counter read is ordered, RDTSCP), so the monotonic clock at x₀ is at
// least m₀, and from there the extrapolation advances at k, below the
// monotonic clock's rate as long as that rate, against the counter, has
// not fallen by more than 977 ppm below its average over the baseline
// (the kernel's NTP frequency corrections stay within 500 ppm). A reading
// behind the true value is one taken a little earlier, which every limiter
// here already treats as a stale reading that adds nothing.
//
// Every re-anchoring checks the promise: if the old anchor's extrapolation
// to the new counter value is ahead of a monotonic reading taken after it,
// the assumption failed (the counter changed rate, as after a VM
// migration, or the kernel slewed its clock faster than NTP does), and the
// clock turns itself off for good: every later reading is the monotonic
// clock's own. Off reports it.
//
// # When it is used
//
// Only on linux/amd64 without the admit_purego build tag, on a processor
// whose counter runs at a constant rate in every power state (CPUID's
// invariant TSC bit), and only if the kernel itself uses the counter for
// its clock (clocksource "tsc": the kernel has checked that the cores'
// counters agree). Elsewhere Enable reports false and Now is the monotonic
// clock.
package tsc

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// spanNS is how long, in nanoseconds, one anchor serves.
	spanNS = 32_000
	// biasShift lowers the scale by 2^-biasShift, for changes in the
	// monotonic clock's rate since the baseline.
	biasShift = 10
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

// Clock is the anchor and its upkeep. The package uses one, std, for the
// whole process; tests build others on fake counters. A Clock is safe for
// concurrent use and must not be copied after first use. Its zero value is
// not usable: see newClock.
type Clock struct {
	// The anchor, written as a seqlock under mu: seq is odd while the
	// fields change, and a reader that sees it odd or changed does not use
	// what it read. span == 0 means no anchor (not calibrated yet, or off).
	seq  atomic.Uint64
	x0   atomic.Uint64
	m0   atomic.Int64
	k    atomic.Uint64
	span atomic.Uint64

	// ready is the monotonic reading before which calibration cannot
	// succeed: a reading before it skips the lock.
	ready atomic.Int64
	off   atomic.Bool // set once, never cleared

	mu     sync.Mutex
	b0, b1 point // the scale's baselines, b0 older; require mu

	tick func() uint64 // the counter, ordered after earlier loads (RDTSCP)
	mono func() int64  // the monotonic clock
}

// newClock returns a Clock over the counter tick and the monotonic clock
// mono, calibrating from now.
func newClock(tick func() uint64, mono func() int64) *Clock {
	c := &Clock{tick: tick, mono: mono}
	p := c.point()
	c.b0, c.b1 = p, p
	c.ready.Store(p.m + minBase)
	return c
}

func (c *Clock) point() point {
	m := c.mono()
	x := c.tick()
	return point{x: x, m: m, mb: c.mono()}
}

// at returns the reading for counter value x: the anchor's extrapolation
// if x is within its span, else the monotonic clock's own reading.
func (c *Clock) at(x uint64) int64 {
	s := c.seq.Load()
	x0, m0, k, span := c.x0.Load(), c.m0.Load(), c.k.Load(), c.span.Load()
	// d·k < span·k <= spanNS·2^32 < 2^47: no overflow.
	if d := x - x0; d < span && s&1 == 0 && c.seq.Load() == s {
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
	p := c.point()
	if p.mb-p.m > maxPair {
		c.ready.Store(p.m + minBase) // try again a little later
		return
	}
	if c.span.Load() != 0 {
		// The old anchor's extrapolation to p.x, however far past its
		// span, must not be ahead of the monotonic clock there (at most
		// p.mb).
		if d := int64(p.x - c.x0.Load()); d > 0 {
			hi, lo := bits.Mul64(uint64(d), c.k.Load())
			if hi >= 1<<31 || c.m0.Load()+int64(hi<<32|lo>>32) > p.mb {
				c.turnOff()
				return
			}
		}
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

func (c *Clock) publish(x0 uint64, m0 int64, k, span uint64) {
	c.seq.Add(1)
	c.x0.Store(x0)
	c.m0.Store(m0)
	c.k.Store(k)
	c.span.Store(span)
	c.seq.Add(1)
}

// turnOff makes every later reading the monotonic clock's. Requires mu.
func (c *Clock) turnOff() {
	c.off.Store(true)
	c.publish(0, 0, 0, 0)
}

// start is the origin of the monotonic readings: time.Since on a Time
// with a monotonic reading reads the monotonic clock only.
var start = time.Now()

func monotonic() int64 { return int64(time.Since(start)) }

var (
	std     *Clock
	stdOnce sync.Once
	stdOn   bool
)

// Enable starts the process's clock if this machine supports it (see the
// package doc) and reports whether Now reads the counter. It reads a file
// and executes CPUID on its first call, so constructors call it, not hot
// paths.
func Enable() bool {
	stdOnce.Do(func() {
		if supported() {
			std = newClock(rdtscp, monotonic)
			stdOn = true
		}
	})
	return stdOn
}

// Now returns the monotonic clock in nanoseconds from an arbitrary origin
// fixed for the process, read through the counter. It may be called only
// after Enable has reported true.
func Now() int64 { return std.at(rdtsc()) }

// Mono returns the monotonic clock's own reading, from the same origin as
// Now's.
func Mono() int64 { return monotonic() }

// Off reports whether the process's clock turned itself off after finding
// a reading ahead of the monotonic clock (see the package doc).
func Off() bool { return std != nil && std.off.Load() }
