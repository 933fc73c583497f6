package adaptive

import "math"

// Algorithm is how a Limiter learns its limit from the outcomes of its
// permits, once per update window. Choose one with Gradient, Vegas or AIMD;
// the zero value is not an algorithm. Algorithms are values: one may serve
// any number of limiters.
type Algorithm struct {
	kind    int
	backoff float64 // multiplicative decrease on drops
}

// Gradient's band: it raises a binding limit while the window's latency is
// below 1+gradLow times the no-load latency, and cuts it above 1+gradHigh.
// A window's latency is the mean of its fastest trimQ of successes: a fifth
// left out keeps the 200 and 500 ms calls of a 70/20/7/3% mix of
// 40/80/200/500 ms out of a window of 40 nearly always, where a tenth left
// out let their count swing the mean by a sixth from window to window.
const (
	gradLow  = 0.15
	gradHigh = 0.5
	trimQ    = 0.8
)

// lossTolerance is the share of a window's outcomes that may be drops,
// if more than one, before the window counts as a loss: calls that time
// out or fail for reasons unrelated to load (a caller that went away, a
// call that can never finish in time) must not drive the limit down.
const lossTolerance = 0.05

const (
	kindGradient = iota + 1
	kindVegas
	kindAIMD
)

// Gradient is the default algorithm. It compares the window's latency
// with the no-load latency b: r = latency/b. Above r = 1.5, when callers
// were shed or waited and the mean of the window's fastest half is also
// above 1.15 times its own no-load value (a queue delays every call; a
// window that drew more slow calls of a two-mode backend moves only its
// upper part), it cuts the limit in one step to the knee the queue
// implies, in flight ÷ r, raised to the middle of the band (× 1.325) plus
// one call, by at most 30% per window; below r = 1.15, when callers were
// shed or waited, it raises it, by a quarter if no queue is visible (r <=
// 1.05), else by what would bring r to 1.15; in between it holds. A window
// whose drops (of permits taken since the last change) are more than 5% of
// its outcomes, and more than one, cuts the limit by a tenth, whatever the
// latency, and one whose calls were all lost, two or more, halves it. Its
// target is the knee it measures, not the current limit plus a queue term,
// so a modest overload cannot raise it a little every window.
func Gradient() Algorithm { return Algorithm{kind: kindGradient, backoff: 0.9} }

// Vegas is the delay-based algorithm of TCP Vegas: it estimates the queue
// as I·(1 − b/latency), I the average calls in flight, and moves the
// limit by max(1, log10 L) per window, up below the queue α = max(3,
// 3·log10 L) and down above β = max(6, 6·log10 L), with Gradient's drop
// rules. It reacts more slowly than
// Gradient to a change of capacity and keeps a queue of α to β calls: on a
// backend of few workers that is a long wait (in the simulator, 4 workers
// of 100 ms at 2×–5×: a limit of 8–9, p50 1.9–2.0× the no-load latency).
func Vegas() Algorithm { return Algorithm{kind: kindVegas, backoff: 0.9} }

// AIMD ignores latency and learns from drops alone: it adds one to the
// limit each window in which callers were shed or waited and drops were
// within the tolerance (at most 5% of the outcomes, or one), and
// multiplies it by 0.9 in a window with more (halves it when every call,
// two or more, was dropped). Use it where latency says nothing about load
// (a backend whose work varies widely) and the backend reports overload
// explicitly, or calls time out. It settles where drops begin: on a
// backend that queues rather than refuses, where calls start to time out
// (in the simulator, 8 workers of 100 ms at 3× with callers giving up
// after 1 s: a limit of 72–81, p50 9.5× the no-load latency).
func AIMD() Algorithm { return Algorithm{kind: kindAIMD, backoff: 0.9} }

// String names the algorithm.
func (a Algorithm) String() string {
	switch a.kind {
	case kindGradient:
		return "gradient"
	case kindVegas:
		return "vegas"
	case kindAIMD:
		return "aimd"
	}
	return "algorithm(invalid)"
}

// window is what an update window saw: the successes of permits taken
// since the limit last changed, the drops of those taken since it was last
// cut.
type window struct {
	limit     float64 // the limit during the window
	inflight  float64 // time-averaged calls in flight
	latency   float64 // mean of the fastest trimQ of the successes, ns; 0 if none
	latency2  float64 // mean of the fastest half of the successes, ns; 0 if none
	base      float64 // no-load latency estimate, ns; 0 if unknown
	base2     float64 // the same estimate of latency2
	successes int
	drops     int
	lossy     bool // more drops than lossTolerance of the outcomes, and more than one
	saturated bool // a caller was shed or had to wait
	// How the window answered the last change of the limit: its
	// direction, and the ratios of this window's in-flight and latency to
	// the last one's (0 when either window had drops or no latency).
	moved  int8
	di, dm float64
	// In a run of cuts, the ratios to the first window after its first
	// cut (0 outside one).
	ci, cm, cx float64
}

// next returns the limit the algorithm chooses after window w, before the
// bounds are applied.
func (a Algorithm) next(w *window) float64 {
	L := w.limit
	lossy := w.lossy
	if w.lossy && w.successes == 0 {
		// Every call was lost, and more than one (timeouts of a limit far
		// too high, a backend refusing everything): halve.
		return L / 2
	}
	switch a.kind {
	case kindAIMD:
		if lossy {
			return L * a.backoff
		}
		if w.saturated {
			return L + 1
		}
		return L
	case kindVegas:
		if w.latency <= 0 || w.base <= 0 {
			if lossy {
				return L * a.backoff
			}
			return L
		}
		lg := math.Max(1, math.Log10(L))
		alpha, beta := math.Max(3, 3*lg), math.Max(6, 6*lg)
		q := w.inflight * (1 - w.base/w.latency)
		next := L
		switch {
		case q > beta:
			next = L - lg
		case q < alpha && w.saturated:
			next = L + lg
		}
		if lossy {
			next = math.Min(next, L*a.backoff)
		}
		return next
	}
	// Gradient.
	if w.latency <= 0 || w.base <= 0 {
		if lossy {
			return L * a.backoff
		}
		return L
	}
	r := math.Max(1, w.latency/w.base)
	next := L
	switch {
	case r > 1+gradHigh && w.saturated && (w.base2 <= 0 || w.latency2 > (1+gradLow)*w.base2):
		// A queue delays every call, the fastest half too; a window that
		// drew more slow calls than usual from a backend of two kinds
		// (cache hits and misses) reads high with its fastest half
		// unmoved. Cut only when the fastest half shows a queue as well:
		// a 70/30 mix of 1 and 200 ms calls at half load was shed 17-45%
		// by cuts on the number of misses a window drew.
		next = math.Max(L*0.7, w.inflight/r*(1+(gradLow+gradHigh)/2)+1)
	case r < 1+gradLow && w.saturated:
		// With no queue in sight the knee may be far: a quarter more. With
		// some, only what would bring the latency up to the band's floor.
		// A raise of the in-flight that the latency did not follow says
		// the same as a ratio near 1: the knee is further up.
		f := 1.25
		flat := w.moved > 0 && w.di >= 1.1 && w.dm-1 < (w.di-1)/3
		if r > 1.05 && !flat {
			f = (1 + gradLow) / r
		}
		// By at least one, but otherwise no further than f above the
		// calls in flight: a window that used little of its limit on
		// average (shedding only in bursts) has shown no latency for the
		// limit above them.
		next = math.Max(L+1, math.Min(L*f, w.inflight*f+1))
	}
	if lossy {
		next = math.Min(next, L*a.backoff)
	}
	return next
}
