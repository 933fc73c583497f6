package tsc

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// world is a fake machine: true time t in nanoseconds, a counter that
// ticks num/den times per nanosecond (switching to num2/den at t = jump, a
// counter that changes rate), and a monotonic clock whose rate against
// true time is 1 + ppm·10^-6 from each segment's start on (NTP frequency
// corrections). Every read takes lat nanoseconds of true time. Both clocks
// are pure functions of t, so goroutines may share a world.
type world struct {
	t        atomic.Int64
	x0       uint64
	num, den uint64
	num2     uint64
	jump     int64 // 0: never
	segs     []seg
	lat      int64
	// latX and latM, when set, replace lat for counter and monotonic
	// reads: a counter read that lands near one end of its pair.
	latX, latM atomic.Int64
}

type seg struct{ from, ppm int64 }

func (w *world) counterAt(t int64) uint64 {
	if w.jump == 0 || t < w.jump {
		return w.x0 + uint64(t)*w.num/w.den
	}
	return w.x0 + uint64(w.jump)*w.num/w.den + uint64(t-w.jump)*w.num2/w.den
}

func (w *world) monoAt(t int64) int64 {
	m := t
	for i, s := range w.segs {
		end := t
		if i+1 < len(w.segs) && w.segs[i+1].from < end {
			end = w.segs[i+1].from
		}
		if end > s.from {
			m += (end - s.from) * s.ppm / 1_000_000
		}
	}
	return m + 1_000_000_000 // an origin that is not the counter's
}

func (w *world) tick() uint64 { return w.counterAt(w.t.Add(w.lat + w.latX.Load())) }
func (w *world) mono() int64  { return w.monoAt(w.t.Add(w.lat + w.latM.Load())) }

// lagBound is the most a reading may be behind the monotonic clock: the
// anchor's pair window, plus a span's drift at twice the bias (the bias,
// and the baseline's uncertainty, at most as much again).
const lagBound = maxPair + 2*spanNS>>biasShift + 1

// read takes one reading at true time now and checks it against the
// monotonic clock at the start and the end of the call: never ahead of
// the end, at most lagBound behind the start.
func read(t *testing.T, w *world, c *Clock) (fast bool) {
	t.Helper()
	t0 := w.t.Add(w.lat)
	before := w.monoAt(t0)
	x := w.counterAt(t0)
	a := c.live()
	fast = a.span.Load() != 0 && x-a.x0.Load() < a.span.Load()
	r := c.at(x)
	after := w.monoAt(w.t.Load())
	if r > after {
		t.Fatalf("reading %d is ahead of the monotonic clock %d at the end of the call (by %d ns)", r, after, r-after)
	}
	if r < before-lagBound {
		t.Fatalf("reading %d is %d ns behind the monotonic clock at the start of the call (bound %d)", r, before-r, lagBound)
	}
	return fast
}

// calibrate reads c every step nanoseconds of w's time, each reading
// checked by read, until c has an anchor.
func calibrate(t *testing.T, w *world, c *Clock, step int64) {
	t.Helper()
	for c.live().span.Load() == 0 {
		w.t.Add(step)
		read(t, w, c)
	}
}

func TestBounds(t *testing.T) {
	cases := []struct {
		name     string
		num, den uint64
		segs     []seg
		lat      int64
	}{
		{"1GHz", 1, 1, []seg{{0, 0}}, 15},
		{"3.1GHz/fast-ntp", 31, 10, []seg{{0, 400}}, 15},
		{"2.4996GHz/slow-ntp", 24996, 10000, []seg{{0, -450}}, 15},
		{"3.7GHz/ntp-steps", 37, 10, []seg{{0, 0}, {3e8, 480}, {6e8, -20}, {9e8, -470}, {12e8, 0}}, 15},
		{"0.8GHz/ntp-steps", 4, 5, []seg{{0, -300}, {2e8, 300}, {5e8, -300}}, 15},
		// Reads that take 90 ns: pairs 180 ns wide, the widest allowed,
		// so calibration waits for a baseline of 180 µs at least.
		{"2GHz/slow-reads", 2, 1, []seg{{0, 0}}, 90},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			w := &world{x0: 1 << 40, num: tc.num, den: tc.den, segs: tc.segs, lat: tc.lat}
			c := newClock(w.tick, w.mono)
			var fast, reads int
			for w.t.Load() < 15e8 {
				// Gaps from a few ns to a few ms: readings inside one
				// span, across spans, and after idle time.
				switch rng.IntN(10) {
				case 0:
					w.t.Add(rng.Int64N(5e6))
				case 1, 2:
					w.t.Add(rng.Int64N(100_000))
				default:
					w.t.Add(rng.Int64N(2_000))
				}
				if read(t, w, c) {
					fast++
				}
				reads++
			}
			if c.off.Load() {
				t.Fatal("the clock turned itself off, although the monotonic clock never changed rate by more than 500 ppm")
			}
			// The point of the clock: most readings come from the anchor.
			if fast*10 < reads*7 {
				t.Fatalf("%d of %d readings came from an anchor; want at least 70%%", fast, reads)
			}
		})
	}
}

// TestConcurrent shares a clock between goroutines that read at once, so
// that readers race re-anchoring (run it under -race).
func TestConcurrent(t *testing.T) {
	w := &world{x0: 7, num: 3, den: 1, segs: []seg{{0, 200}, {2e8, -200}}, lat: 5}
	c := newClock(w.tick, w.mono)
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for range 20_000 {
				w.t.Add(rng.Int64N(30_000))
				t0 := w.t.Load()
				before := w.monoAt(t0)
				r := c.at(w.counterAt(t0))
				if after := w.monoAt(w.t.Load()); r > after || r < before-lagBound {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d readings outside [start − %d ns, end]", n, lagBound)
	}
	if c.off.Load() {
		t.Fatal("the clock turned itself off")
	}
}

// TestCalibration: no anchor before the baseline is long enough, nor from
// reads too slow to pair a counter value with the monotonic clock; until
// then every reading is the monotonic clock's own.
func TestCalibration(t *testing.T) {
	w := &world{x0: 0, num: 2, den: 1, segs: []seg{{0, 0}}, lat: 10}
	c := newClock(w.tick, w.mono)
	for w.t.Load() < minBase/2 {
		w.t.Add(1000)
		if read(t, w, c) {
			t.Fatal("a reading came from an anchor before the baseline was long enough")
		}
	}
	slow := &world{x0: 0, num: 2, den: 1, segs: []seg{{0, 0}}, lat: maxPair}
	c = newClock(slow.tick, slow.mono)
	for slow.t.Load() < 100*minBase {
		slow.t.Add(5000)
		if read(t, slow, c) {
			t.Fatal("an anchor was made from reads too slow to pair")
		}
	}
	if c.live().span.Load() != 0 {
		t.Fatal("calibrated from reads too slow to pair")
	}
	// Pairs 198 ns wide, the counter read at the near end of the first
	// and at the far end of every later one: the worst case, where the
	// baseline's advance is 396 ns more than its lower bound. The first
	// scale must still be the true one (2^32 ns per 2 ticks) lowered by
	// the bias and by at most as much again for that uncertainty, which
	// takes a baseline of 396·2^biasShift ns, not minBase.
	wide := &world{x0: 0, num: 2, den: 1, segs: []seg{{0, 0}}}
	wide.latM.Store(198)
	c = newClock(wide.tick, wide.mono)
	wide.latM.Store(0)
	wide.latX.Store(198)
	calibrate(t, wide, c, 500)
	if k, want := c.live().k.Load(), uint64(1)<<31; k < want-2*(want>>biasShift) || k > want-want>>biasShift {
		t.Fatalf("first scale %d, want within [%d, %d]", k, want-2*(want>>biasShift), want-want>>biasShift)
	}
}

// TestTurnsOff: when the assumption fails (a counter that speeds up by 2%,
// as after a VM migration; a monotonic clock slewed 8% slower), readings
// may run ahead, by at most a span's worth of the excess rate; the next
// re-anchoring finds the extrapolation ahead and turns the clock off, and
// from then on every reading is the monotonic clock's.
func TestTurnsOff(t *testing.T) {
	cases := []struct {
		name   string
		w      *world
		excess float64 // how much faster than the monotonic clock the extrapolation runs, at most
	}{
		{"counter+2%", &world{x0: 100, num: 50, den: 10, num2: 51, jump: 2e8 + 1e6, segs: []seg{{0, 0}}, lat: 10}, 0.02},
		{"monotonic-8%", &world{x0: 100, num: 3, den: 1, segs: []seg{{0, 0}, {2e8 + 1e6, -80_000}}, lat: 10}, 0.087},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, c := tc.w, newClock(tc.w.tick, tc.w.mono)
			for w.t.Load() < 2e8 {
				w.t.Add(777)
				read(t, w, c)
			}
			if c.off.Load() || c.live().span.Load() == 0 {
				t.Fatal("not calibrated before the change")
			}
			ahead := int64(tc.excess*spanNS) + 1
			for w.t.Load() < 2e8+1e6+10*spanNS && !c.off.Load() {
				w.t.Add(777)
				t0 := w.t.Load()
				r := c.at(w.counterAt(t0))
				if after := w.monoAt(w.t.Load()); r > after+ahead {
					t.Fatalf("reading %d ahead of the monotonic clock by %d ns, more than a span's excess (%d)", r, r-after, ahead)
				}
			}
			if !c.off.Load() {
				t.Fatal("the clock did not turn itself off within ten spans of the change")
			}
			for range 1000 {
				w.t.Add(777)
				r := c.at(w.counterAt(w.t.Load()))
				if r != w.monoAt(w.t.Load()) {
					t.Fatalf("after turning off, a reading %d is not the monotonic clock's", r)
				}
			}
		})
	}
}

// TestStaysOff: a caller that found the clock on and then won the lock
// after another caller turned it off must not anchor it again.
func TestStaysOff(t *testing.T) {
	w := &world{x0: 0, num: 3, den: 1, segs: []seg{{0, 0}}, lat: 10}
	c := newClock(w.tick, w.mono)
	calibrate(t, w, c, 1000)
	c.mu.Lock()
	c.turnOff()
	w.t.Add(spanNS)
	c.anchor() // what the late caller does once it holds the lock
	c.mu.Unlock()
	if c.live().span.Load() != 0 {
		t.Fatal("anchored again after turning off")
	}
}

// TestOffEmptiesBothSlots: turning the clock off leaves no anchor in
// either slot, so that a reader that loaded cur before the switch, and
// reads the slot that was in use, does not extrapolate from the anchor
// that was found ahead.
func TestOffEmptiesBothSlots(t *testing.T) {
	w := &world{x0: 0, num: 3, den: 1, segs: []seg{{0, 0}}, lat: 10}
	c := newClock(w.tick, w.mono)
	calibrate(t, w, c, 1000)
	c.mu.Lock()
	c.turnOff()
	c.mu.Unlock()
	for i := range c.slots {
		if a := &c.slots[i]; a.span.Load() != 0 || a.seq.Load()&1 != 0 {
			t.Errorf("slot %d after turnOff: span %d, seq %d; want no anchor", i, a.span.Load(), a.seq.Load())
		}
	}
}

// TestFollowsNTP: after the monotonic clock's rate changes by 400 ppm (an
// NTP frequency correction) and stays there, the scale follows it within
// a second: the baseline is from rebase to 2·rebase old, not the process's
// whole life.
func TestFollowsNTP(t *testing.T) {
	w := &world{x0: 0, num: 3, den: 1, segs: []seg{{0, 0}, {5e8, 400}}, lat: 10}
	c := newClock(w.tick, w.mono)
	for w.t.Load() < 2e9 {
		w.t.Add(5000)
		read(t, w, c)
	}
	// 2^32/3 ns per tick, 400 ppm faster, lowered by the bias.
	want := float64(1<<32) / 3 * (1 + 400e-6) * (1 - 1.0/(1<<biasShift))
	if got := float64(c.live().k.Load()); got < want*(1-20e-6) || got > want*(1+20e-6) {
		t.Fatalf("scale %.0f after the change, want %.0f within 20 ppm (%.1f ppm off)", got, want, (got/want-1)*1e6)
	}
}

// TestIdle: a monotonic clock that runs 3000 ppm slower for most of a 2 s
// idle gap (or stops, as in a suspend, for 1 s) served no reading ahead, so
// the clock stays on; readings after the gap keep the bounds.
func TestIdle(t *testing.T) {
	cases := []struct {
		name string
		segs []seg
	}{
		{"slewed", []seg{{0, 0}, {11e8, -3000}, {20e8, 0}}},
		{"suspended", []seg{{0, 0}, {10e8, -1_000_000}, {20e8, 0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := &world{x0: 0, num: 3, den: 1, segs: tc.segs, lat: 10}
			c := newClock(w.tick, w.mono)
			for w.t.Load() < 9e8 {
				w.t.Add(3000)
				read(t, w, c)
			}
			w.t.Store(21e8) // idle from 0.9 s to 2.1 s
			for range 100_000 {
				w.t.Add(3000)
				read(t, w, c)
			}
			if c.off.Load() {
				t.Fatal("turned off for idle time in which no reading was served")
			}
		})
	}
}

// TestBackwards: a counter that does not advance is no clock.
func TestBackwards(t *testing.T) {
	w := &world{x0: 1 << 50, num: 0, den: 1, segs: []seg{{0, 0}}, lat: 10}
	c := newClock(w.tick, w.mono)
	for range 1000 {
		w.t.Add(1000)
		c.at(w.counterAt(w.t.Load()))
	}
	if !c.off.Load() {
		t.Fatal("a counter that never advanced did not turn the clock off")
	}
}

// TestSystem reads the real counter, where this machine supports it,
// against the monotonic clock read just before and just after: never
// ahead, and behind by at most the design bound plus 1 µs for the
// unordered read executing ahead of the monotonic read before it.
func TestSystem(t *testing.T) {
	if !Enable() {
		t.Skip("the counter cannot stand in for the monotonic clock on this machine; Now is never used")
	}
	var fast int
	for i := range 200_000 {
		before := monotonic()
		r := Now()
		after := monotonic()
		if r > after {
			t.Fatalf("reading %d: %d is ahead of the monotonic clock %d by %d ns", i, r, after, r-after)
		}
		if r < before-lagBound-1000 {
			t.Fatalf("reading %d: %d is %d ns behind the monotonic clock", i, r, before-r)
		}
		if std.live().span.Load() != 0 {
			fast++
		}
	}
	if std.off.Load() {
		t.Fatal("the clock turned itself off: it found a reading ahead of the monotonic clock")
	}
	if fast == 0 {
		t.Fatal("never calibrated")
	}
}

// TestLayout checks what the Clock's comment promises: each slot fills a
// cache line, cur and the lock are on lines of their own, and a Clock
// from newClock starts on a line, so that no two of them share one.
func TestLayout(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the counter is read only on amd64; elsewhere the layout need only compile")
	}
	if pad := unsafe.Sizeof(cpu.CacheLinePad{}); pad != cacheLine {
		t.Errorf("cacheLine is %d, cpu.CacheLinePad %d bytes", cacheLine, pad)
	}
	if got := unsafe.Sizeof(anchor{}); got != cacheLine {
		t.Errorf("an anchor slot is %d bytes, want one line (%d)", got, cacheLine)
	}
	var c Clock
	lines := map[string]uintptr{
		"slots[0]": unsafe.Offsetof(c.slots),
		"slots[1]": unsafe.Offsetof(c.slots) + cacheLine,
		"cur":      unsafe.Offsetof(c.cur),
		"mu":       unsafe.Offsetof(c.mu),
	}
	seen := map[uintptr]string{}
	for name, off := range lines {
		if off%cacheLine != 0 {
			t.Errorf("%s at offset %d, not at a line's start", name, off)
		}
		if other, ok := seen[off/cacheLine]; ok {
			t.Errorf("%s and %s share line %d", name, other, off/cacheLine)
		}
		seen[off/cacheLine] = name
	}
	if got := unsafe.Sizeof(c); got != 5*cacheLine {
		t.Errorf("a Clock is %d bytes, want %d: a size class whose objects start on a line", got, 5*cacheLine)
	}
	w := &world{num: 2, den: 1, segs: []seg{{0, 0}}}
	for i := 0; i < 64; i++ {
		if p := uintptr(unsafe.Pointer(newClock(w.tick, w.mono))); p%cacheLine != 0 {
			t.Fatalf("newClock returned a Clock at %#x, not on a line", p)
		}
	}
}
