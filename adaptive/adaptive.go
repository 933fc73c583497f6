package adaptive

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/admit-go/admit"
)

// Limiter is an adaptive concurrency limiter. It is safe for concurrent use.
// The zero value is not usable; create one with New. A Limiter must not be
// copied after first use.
//
// One mutex guards the state; it is held for a few dozen instructions per
// Acquire and per Permit end (and, once per update window, for the update),
// never while a caller waits or while time is read.
type Limiter struct {
	_   noCopy
	cfg config // immutable after New
	clk admit.Clock

	// limitA and inflightA mirror limit and inflight for Limit and
	// InFlight, which read them without the mutex. Written under mu.
	limitA    atomic.Int64
	inflightA atomic.Int64

	mu sync.Mutex
	// Everything below requires mu.

	limit    int     // the enforced limit: ⌊lim⌋ clamped to the bounds
	lim      float64 // the algorithm's limit, fractional so that small steps add up
	inflight int     // permits handed out and not yet ended

	// epoch is the time of the last change of limit. Only permits taken at
	// or after it are samples: one taken before saw another limit, and a
	// drop it reports was already answered (a deadline drop arrives a whole
	// deadline after its admission, many windows late).
	epoch int64
	// The current update window: since start, the successes' latencies,
	// the drops, the integral of inflight over time (for its average), and
	// whether any caller was shed or had to wait.
	start     int64
	last      int64   // the latest time applied to area; never decreases
	area      float64 // Σ inflight × ns since start
	hist      histogram
	drops     int
	saturated bool

	// base is the no-load latency estimate in ns, 0 until the first window.
	// Only two things raise it: a probe, a window run at half the limit,
	// below the knee, whose latency is the no-load latency by construction;
	// and a window in which nobody waited and at most half the limit was in
	// use. Any other window may only lower it. So a long overload, whose
	// windows are all slow, cannot drag it up; a backend that really got
	// slower is found by the next probe. baseAge counts windows since it was
	// last measured; at probeEvery a window in which the limit bound starts
	// a probe. Windows with drops, or soon after some, leave it alone: the
	// backend may still be busy with work its callers gave up on.
	base      float64
	baseAge   int
	probing   bool
	probes    int     // probes completed
	probeStep int     // steps of the current probe before this window
	probeFrom float64 // the latency of the window before the probe step
	probeBase float64 // the no-load estimate before the probe step
	restore   float64 // the limit to go back to after the probe
	lossless  int     // windows since the last one with drops

	// The backlog: one FIFO per priority, mask bit i set when queue i is
	// non-empty.
	queues [numPriorities]waitQueue
	mask   uint8
	nwait  int

	stats Stats

	// testHookUpdate, when set (by tests, before first use), is called
	// under mu after every update with its time and the new limit.
	testHookUpdate func(now int64, limit int)
}

// probeEvery is how many update windows may pass without a confirmation of
// the no-load latency before a saturated window probes it.
const probeEvery = 50

// noCopy makes go vet's copylocks check flag copies of a Limiter.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// New returns a Limiter configured by opts: by default the Gradient
// algorithm, limit bounds [DefaultMinLimit, DefaultMaxLimit], initial limit
// DefaultInitialLimit, no backlog (callers beyond the limit are shed at
// once) and the system's monotonic clock. It returns an error wrapping
// admit.ErrInvalidConfig, naming the value, for a nil or invalid option.
func New(opts ...Option) (*Limiter, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	l := &Limiter{cfg: cfg, clk: cfg.clock}
	now := l.clk.Now()
	l.lim = float64(cfg.initial)
	l.limit = cfg.initial
	l.epoch, l.start, l.last = now, now, now
	l.hist.reset()
	l.limitA.Store(int64(l.limit))
	return l, nil
}

// Limit returns the current limit: how many permits may be out at once.
func (l *Limiter) Limit() int { return int(l.limitA.Load()) }

// InFlight returns how many permits are out: acquired and not yet ended. It
// exceeds Limit only after a decrease, by permits handed out before it.
func (l *Limiter) InFlight() int { return int(l.inflightA.Load()) }

// Acquire takes a permit for one call at the priority ctx carries
// (ContextWithPriority; Normal by default). It returns at once with a
// permit if fewer than the limit are out (a little less for Low and
// Sheddable, see the package doc) and no caller of the same or higher
// priority waits. Otherwise, without a backlog, or with a full one that
// holds nobody of lower priority, it returns at once an error wrapping
// admit.ErrOverloaded. With room in the backlog it waits, until a permit is
// handed to it, until the backlog's maxWait has passed (admit.ErrOverloaded),
// until a caller of higher priority takes its place (admit.ErrOverloaded),
// or until ctx ends: then it returns ctx.Err() unchanged. A ctx already
// ended returns ctx.Err() at once.
//
// The caller must end the permit exactly once, with Success, Dropped or
// Ignore, when the call is done; further calls are no-ops. Acquire
// allocates nothing on the path that admits at once, provided the Permit
// does not escape the caller (Acquire is inlined and the Permit lives in
// the caller's frame).
func (l *Limiter) Acquire(ctx context.Context) (*Permit, error) {
	p := new(Permit)
	if err := l.acquire(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

// threshold is how many permits may be out when a caller of priority p is
// admitted at once: the limit for Normal and above, 7/8 of it for Low and
// 3/4 for Sheddable (never below 1), so that under load the lower classes
// are shed first and leave room for the others. Requires mu.
func (l *Limiter) threshold(p Priority) int {
	switch {
	case p >= Normal:
		return l.limit
	case p == Low:
		return max(1, l.limit-l.limit/8)
	}
	return max(1, l.limit-l.limit/4)
}

// acquire fills p, which must be zero, or returns why not. p is never
// stored anywhere: it stays in the caller's frame.
func (l *Limiter) acquire(ctx context.Context, p *Permit) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	prio := PriorityFrom(ctx)
	now := l.clk.Now()
	l.mu.Lock()
	if l.inflight < l.threshold(prio) && l.mask>>prio.index() == 0 {
		l.advance(now)
		l.inflight++
		l.stats.Admitted++
		l.inflightA.Store(int64(l.inflight))
		l.mu.Unlock()
		p.l, p.start = l, now
		return nil
	}
	l.saturated = true
	if l.cfg.backlog == 0 {
		return l.shedLocked(prio)
	}
	if l.nwait >= l.cfg.backlog {
		victim := l.lowestBelow(prio)
		if victim == nil {
			return l.shedLocked(prio)
		}
		l.remove(victim)
		victim.state = waitShed
		l.stats.Displaced++
		victim.cancel()
	}
	return l.wait(ctx, prio, p)
}

// shedLocked counts a shed call, unlocks mu and returns its error.
func (l *Limiter) shedLocked(prio Priority) error {
	l.stats.Shed++
	err := &OverloadedError{Limit: l.limit, InFlight: l.inflight, Priority: prio}
	l.mu.Unlock()
	return err
}

// advance adds inflight × elapsed to the window's area. A reading earlier
// than one already applied adds nothing. Requires mu.
func (l *Limiter) advance(now int64) {
	if now > l.last {
		l.area += float64(l.inflight) * float64(now-l.last)
		l.last = now
	}
}

type outcome uint8

const (
	success outcome = iota
	dropped
	ignored
)

// end releases a permit and records its outcome. Requires p taken from l
// and ended for the first time.
func (l *Limiter) end(p *Permit, o outcome) {
	now := l.clk.Now()
	l.mu.Lock()
	l.advance(now)
	l.inflight--
	switch o {
	case success:
		l.stats.Successes++
	case dropped:
		l.stats.Drops++
	default:
		l.stats.Ignored++
	}
	if o != ignored && p.start >= l.epoch {
		if o == success {
			l.hist.add(now - p.start)
		} else {
			l.drops++
		}
		// A window closes with enough outcomes to span about two round
		// trips, or as soon as minSamples were drops: losses need no
		// statistics, and a limit far too high must come down before its
		// long windows would end.
		if l.hist.n+l.drops >= max(l.cfg.minSamples, 2*l.limit) || l.drops >= l.cfg.minSamples {
			l.update(now)
		}
	}
	if l.nwait > 0 {
		l.grant(now)
	}
	l.inflightA.Store(int64(l.inflight))
	l.mu.Unlock()
}

// update closes the window at now and sets the next limit. Requires mu.
func (l *Limiter) update(now int64) {
	w := window{
		limit:     l.lim,
		inflight:  float64(l.inflight),
		latency:   l.hist.lowerMean(trimQ),
		successes: l.hist.n,
		drops:     l.drops,
		saturated: l.saturated,
	}
	if d := l.last - l.start; d > 0 {
		w.inflight = l.area / float64(d)
	}
	if w.drops > 0 {
		l.lossless = 0
	} else {
		l.lossless++
	}
	usesLatency := l.cfg.alg.kind != kindAIMD
	// The no-load latency. A window with drops says nothing about it: the
	// backend may be busy with work its callers gave up on, which this
	// limiter no longer counts.
	m := w.latency
	if usesLatency && w.successes >= max(5, l.cfg.minSamples/4) && w.drops == 0 && (l.lossless >= 2 || l.base == 0) {
		switch {
		case l.base == 0:
			l.base = m
			l.baseAge = probeEvery - 1 // probe soon: the first window may have queued
		case l.probing:
			// A probe runs at half the limit, below the knee: its latency
			// is the no-load latency.
			// The first probe's steps, and every step after a first one
			// found the estimate too high, set it; a periodic probe's
			// first step moves it a third of the way, to average out the
			// noise of one window.
			if l.probes == 0 || l.probeStep > 0 {
				l.base = m
			} else {
				l.base += (m - l.base) / 3
			}
			l.baseAge = 0
		case !w.saturated && (m < l.base || w.inflight < w.limit/2):
			// Nobody waited and at most half the limit was in use on
			// average: the window ran below the knee, or not far past it.
			// A window that used more may have queued, and may only lower
			// the estimate.
			l.base += (m - l.base) / 8
			l.baseAge = 0
		default:
			l.baseAge++
		}
	} else if l.base > 0 {
		l.baseAge++
	}
	w.base = l.base
	next := l.cfg.alg.next(&w)
	switch {
	case l.probing && w.drops == 0 && m > 0 && m < 0.6*l.probeFrom && (l.probes == 0 || m < 0.85*l.probeBase) && w.limit > float64(l.cfg.minLimit):
		// Halving the limit more than halved... nearly halved the latency:
		// the probe still ran above the knee. Probe again at half.
		l.probeFrom, l.probeBase = m, l.base
		l.probeStep++
		next = w.limit / 2
	case l.probing:
		l.probing = false
		l.probes++
		if w.drops == 0 {
			// Back to the limit before the probe, but no further than
			// twice the last step's: a probe that had to go deeper found
			// the estimate too high, and the limit that rested on it with
			// it.
			next = math.Max(next, math.Min(l.restore, 2*w.limit))
		}
	case usesLatency && l.base > 0 && l.baseAge >= probeEvery && w.saturated && w.drops == 0:
		l.probing = true
		l.probeStep = 0
		l.restore = next
		l.probeFrom, l.probeBase = m, l.base
		next = w.limit / 2
	}
	next = math.Max(float64(l.cfg.minLimit), math.Min(float64(l.cfg.maxLimit), next))
	l.lim = next
	limit := int(next)
	if limit != l.limit {
		old := l.limit
		l.limit = limit
		l.limitA.Store(int64(limit))
		l.epoch = now
		if limit > old && l.nwait > 0 {
			l.grant(now)
		}
	}
	l.stats.Updates++
	if l.testHookUpdate != nil {
		l.testHookUpdate(now, l.limit)
	}
	l.start = now
	l.area = 0
	l.hist.reset()
	l.drops = 0
	l.saturated = false
}

// OverloadedError is the error of a shed call. It wraps admit.ErrOverloaded
// and says what the limiter saw when it decided.
type OverloadedError struct {
	Limit    int      // the limit at the decision
	InFlight int      // permits out at the decision
	Priority Priority // the caller's priority
	Waited   bool     // the caller waited in the backlog first
}

func (e *OverloadedError) Error() string {
	how := "shed"
	if e.Waited {
		how = "shed after waiting"
	}
	return fmt.Sprintf("%v: adaptive: %s priority call %s at limit %d with %d in flight",
		admit.ErrOverloaded, e.Priority, how, e.Limit, e.InFlight)
}

// Unwrap returns admit.ErrOverloaded.
func (e *OverloadedError) Unwrap() error { return admit.ErrOverloaded }

// Stats counts what a Limiter decided since New, and reports its state.
type Stats struct {
	Admitted  uint64 // permits handed out at once
	Waited    uint64 // permits handed out after waiting in the backlog
	Shed      uint64 // calls refused with admit.ErrOverloaded (Displaced and TimedOut included)
	Displaced uint64 // waiters shed to make room for a higher priority
	TimedOut  uint64 // waiters shed after maxWait
	Cancelled uint64 // waiters whose context ended first
	Successes uint64 // permits ended with Success
	Drops     uint64 // permits ended with Dropped
	Ignored   uint64 // permits ended with Ignore
	Updates   uint64 // update windows closed
	Limit     int    // the current limit
	InFlight  int    // permits out
	Waiting   int    // callers in the backlog
	// Baseline is the no-load latency estimate in nanoseconds, 0 until the
	// first window (AIMD never sets it).
	Baseline int64
}

// Stats returns the counters and the current state, read together.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	s := l.stats
	s.Limit, s.InFlight, s.Waiting, s.Baseline = l.limit, l.inflight, l.nwait, int64(l.base)
	l.mu.Unlock()
	return s
}
