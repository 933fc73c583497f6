package adaptive

import (
	"context"
	"fmt"
	"math"
	"math/bits"
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

	// skew is added to every reading of the clock: after a step of the
	// clock back (see now), the limiter's time goes on from where it was.
	skew int64
	// hiRaw is the highest reading mapped with the current skew. At a
	// step back, preRaw and preSkew keep the old timeline's frontier and
	// skew, and stepAt the limiter's time then: a reading taken just
	// before the step and applied just after it is mapped on the old
	// timeline (see now).
	// (Before the first step preSkew equals skew; every step raises skew.)
	hiRaw, preRaw, preSkew, stepAt int64

	limit    int     // the enforced limit: ⌊lim⌋ clamped to the bounds
	lim      float64 // the algorithm's limit, fractional so that small steps add up
	inflight int     // permits handed out and not yet ended

	// epoch is the time of the last change of limit. Only successes of
	// permits taken at or after it are latency samples: one taken before
	// saw another limit. Drops go by cutEpoch.
	epoch int64
	// cutEpoch is the time of the last decrease of the limit. A drop of a
	// permit taken at or after it counts even if the limit was raised
	// since: no cut has answered it yet, and a raise only made the limit
	// it reports on higher. (Only cutting answers a drop; a timeout
	// arrives a whole deadline after its admission, and under a limit that
	// is raised every window it would never count at all.)
	cutEpoch int64
	// The current update window: since start, the successes' latencies,
	// the drops, the integral of inflight over time (for its average), and
	// whether any caller was shed or had to wait.
	start     int64
	last      int64   // the latest time applied to area; never decreases
	area      float64 // Σ inflight × ns since start
	hist      histogram
	drops     int
	lateDrops int // the drops of permits handed out of the backlog
	ends      int // permits ended in the window, whenever taken, any outcome
	saturated bool

	// tick is the lowest bucket above 0 that any window's latencies
	// touched, histBuckets before any did: on a coarse clock, its
	// resolution (see update).
	tick int

	// base is the no-load latency estimate in ns, 0 until the first
	// window: see estimate for what changes it and probe for the probes.
	// baseAge counts windows since it was last measured.
	base      float64
	base2     float64 // the same estimate of the window's lower half (latency2)
	baseAge   int
	probing   bool
	probes    int     // probes completed
	probeStep int     // steps of the current probe before this window
	probeFrom float64 // the latency of the window before the probe step
	probeBase float64 // the no-load estimate before the probe step
	restore   float64 // the limit to go back to after the probe
	lossless  int     // windows since the last one with drops
	// dropAge is the shortest admission-to-drop time among the window's
	// counted drops; holdUntil, set by a lossy window to its end plus
	// that time, is when the limit it set can first show drops of its
	// own: no raise before it.
	dropAge, holdUntil int64
	// A probe that found the estimate more than 15% high reads a second
	// window at the same limit before it ends: confirm is 1 when the
	// first asks for it, 2 in the second; probeM and probeN are the
	// first's latency and successes.
	confirm int8
	probeM  float64
	probeM2 float64
	probeN  int

	// The previous window's average in-flight and latency, 0 when its
	// latency was not worth reading, and which way the update after it
	// moved the limit: the next window shows whether the latency followed
	// the in-flight, which tells above the knee from below it.
	prevIn, prevLat float64
	moved           int8
	below           uint8 // bit i: the window i updates ago bound yet read below 0.9·base
	// A run of cuts, not broken by a raise or a probe, and the first
	// window after its first cut, which later windows of the run are
	// compared with: cutRun is 0 outside a run, 1 until that window is
	// read, 2 after.
	cutRun              int8
	runIn, runLat, runX float64

	// top is the highest priority that asked for a permit in this update
	// window, topPrev in the last one.
	top, topPrev Priority

	// The backlog: one FIFO per priority, mask bit i set when queue i is
	// non-empty.
	queues [numPriorities]waitQueue
	mask   uint8
	nwait  int
	// lifo makes grant serve the newest waiter of a priority first: set
	// by a window whose loss came mostly from permits handed out of the
	// backlog, cleared when the backlog empties (see grant).
	lifo bool

	stats Stats

	// testHookUpdate, when set (by tests, before first use), is called
	// under mu after every update with its time and the new limit.
	testHookUpdate func(now int64, limit int)
}

// probeEvery is how many update windows may pass without a confirmation of
// the no-load latency before a saturated window probes it.
const probeEvery = 200

// maxHold bounds the hold after a lossy window: a drop whose permit was
// held far longer than any deadline (a stream, a long poll, a caller
// that ends its permit late) says nothing about when the limit the
// window sets can show drops of its own.
const maxHold = int64(30e9) // 30 s

// minValid is the fewest successes whose latency a window reads.
const minValid = 5

// probeSpan is the widest spread, in histogram buckets above the lowest
// (each 1/16 of its octave), of the latencies of a probe's window that may
// close before minSamples: 2, so at most three buckets, about a sixth.
const probeSpan = 2

// maxSlip is how far a reading of the clock may lie before one already
// applied and still be taken for a late one (a caller that read the clock
// and then waited for the mutex, or was descheduled): it is read as that
// time. Further back, the clock itself went back: see now.
const maxSlip = int64(1e9) // 1 s

// windowRTTs bounds an update window in round trips: see full.
const windowRTTs = 8

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
	l.epoch, l.cutEpoch, l.start, l.last, l.hiRaw = now, now, now, now, now
	l.hist.reset()
	l.tick = histBuckets
	l.limitA.Store(int64(l.limit))
	l.top, l.topPrev = Sheddable, Sheddable
	return l, nil
}

// Limit returns the current limit: how many permits may be out at once.
func (l *Limiter) Limit() int { return int(l.limitA.Load()) }

// InFlight returns how many permits are out: acquired and not yet ended. It
// exceeds Limit only after a decrease, by permits handed out before it.
func (l *Limiter) InFlight() int { return int(l.inflightA.Load()) }

// Acquire takes a permit for one call at the priority ctx carries
// (ContextWithPriority; Normal by default). It returns at once with a
// permit if fewer than the limit are out (a little less for a priority
// below the highest that asked lately, when there is no backlog: see the
// package doc) and no caller of the same or higher priority waits. Otherwise, without a backlog, or with a full one that
// holds nobody of lower priority, it returns at once an error wrapping
// admit.ErrOverloaded. With room in the backlog it waits, until a permit is
// handed to it, until the backlog's maxWait has passed (admit.ErrOverloaded),
// until a caller of higher priority takes its place (admit.ErrOverloaded),
// or until ctx ends: then it returns ctx.Err() unchanged, even if a permit
// was handed to it as ctx ended (the permit goes to the next waiter). A
// ctx already ended returns ctx.Err() at once.
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
// admitted. With a backlog it is the limit for every priority: the backlog
// orders them. Without one, a priority below the highest seen in this
// update window or the last leaves an eighth of the limit per level to
// those above it, rounded up (so at least one permit, whatever the limit,
// while it has more than one), and keeps at least one permit for itself,
// so that under load the lower classes are shed first and the higher ones
// find room; the highest priority present may use the whole limit, so
// traffic of a single priority, whichever it is, has all of it. Requires
// mu.
func (l *Limiter) threshold(p Priority) int {
	if l.cfg.backlog > 0 {
		return l.limit
	}
	levels := int(max(l.top, l.topPrev) - p)
	if levels <= 0 {
		return l.limit
	}
	return max(1, l.limit-(l.limit*levels+7)/8)
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
	now = l.now(now)
	l.top = max(l.top, prio)
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
		// Counted here with Displaced, not when the victim returns: a
		// snapshot must never show Displaced above Shed.
		l.stats.Shed++
		l.stats.Displaced++
		victim.cancel()
	}
	return l.wait(ctx, prio, p, now)
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
	l.endLocked(p, o, l.now(now))
	l.mu.Unlock()
}

// now maps a reading of the clock to the limiter's time, which never goes
// back: a reading up to maxSlip before the latest one applied is taken as
// that one; one further back is a step of the clock back (a fake clock,
// one built on the wall clock), and the limiter's time goes on from the
// latest reading, so that the times it keeps (its window's start, the
// last change and cut of the limit, a hold of raises) are not an hour in
// its future after a step of an hour back, which left every later permit
// "taken before the last change" and the limit frozen until the clock
// caught up. A step forward cannot be told from an idle spell: it counts.
// Requires mu.
//
// A caller reads the clock before it takes mu, so a reading from just
// before a step can be applied just after another caller's reading from
// after it set the new skew. Such a reading, within maxSlip of the old
// timeline's frontier and applied within maxSlip of the step, is mapped
// with the old skew; with the new one it would put the limiter's time an
// hour ahead after a step of an hour back (and the next reading would
// then add an hour more of skew).
func (l *Limiter) now(raw int64) int64 {
	if l.skew != l.preSkew && l.last-l.stepAt <= maxSlip && raw >= l.preRaw-maxSlip && raw <= l.preRaw+maxSlip {
		return max(raw+l.preSkew, l.last)
	}
	t := raw + l.skew
	if t < l.last {
		if l.last-t > maxSlip {
			l.preRaw, l.preSkew, l.stepAt = l.hiRaw, l.skew, l.last
			l.skew += l.last - t
			l.hiRaw = raw
		}
		return l.last
	}
	l.hiRaw = max(l.hiRaw, raw)
	return t
}

// endLocked is end with the time read. Requires mu.
func (l *Limiter) endLocked(p *Permit, o outcome, now int64) {
	l.advance(now)
	l.inflight--
	l.ends++
	switch o {
	case success:
		l.stats.Successes++
	case dropped:
		l.stats.Drops++
	default:
		l.stats.Ignored++
	}
	if o == success && p.start >= l.epoch || o == dropped && p.start >= l.cutEpoch {
		if o == success {
			l.hist.add(now - p.start)
		} else {
			l.drops++
			if p.waited {
				l.lateDrops++
			}
			if age := now - p.start; l.dropAge == 0 || age < l.dropAge {
				l.dropAge = age
			}
		}
		// A window closes with enough outcomes (see full), or as soon
		// as minSamples were drops (two at least: one caller that went
		// away is no loss): losses need no statistics, and a limit far
		// too high must come down before its long windows would end.
		if l.full(l.hist.n+l.drops, now) || l.drops >= max(l.cfg.minSamples, 2) {
			l.update(now)
		}
	}
	if l.nwait > 0 {
		l.grant(now)
	}
	l.inflightA.Store(int64(l.inflight))
}

// full reports whether the window holds enough outcomes, n, to close at
// now: max(minSamples, 2·limit), about two round trips when the limit
// binds; or, if the limit bound in it and it has a quarter of minSamples,
// windowRTTs round trips' worth. By Little's law a round trip delivers as
// many outcomes as there are calls in flight on average (area over the
// window's span), so at a low rate of calls (a backend of two workers,
// say) a window still closes every few round trips instead of every
// minSamples/in-flight of them. A window in which the limit did not bind
// has nothing urgent to say and waits for its count (the uncontended path
// stays cheap). A probe's window takes its full count (its latency becomes
// the no-load estimate), unless every success in it so far lies within
// probeSpan+1 buckets of the histogram, a spread of at most about a sixth,
// with no drop: then max(2·limit, the successes a latency needs to count)
// suffice, and a window that idles some of the backend's workers ends
// sooner. Requires mu, with area advanced to now.
func (l *Limiter) full(n int, now int64) bool {
	// Never fewer than minValid: a window's latency counts (update's
	// valid) only with that many successes, and a limiter whose windows
	// all close sooner (WithMinSamples below it, a limit of 1 or 2) would
	// never learn its no-load latency and hold its limit forever.
	if n >= max(l.cfg.minSamples, 2*l.limit, minValid) {
		return true
	}
	// A steady backend's probe: every latency within a few percent of
	// the others, so a few round trips read the mean as well as minSamples
	// would. hi and lo span the window's successes (add widens them only).
	if l.probing && n == l.hist.n && n >= max(2*l.limit, minValid, l.cfg.minSamples/4) && l.hist.hi-l.hist.lo <= probeSpan {
		return true
	}
	// n ≥ windowRTTs·area/(now-start), without the division.
	return l.saturated && !l.probing && n >= max(l.cfg.minSamples/4, 1) && now > l.start &&
		float64(n)*float64(now-l.start) >= windowRTTs*l.area
}

// update closes the window at now and sets the next limit. Requires mu.
func (l *Limiter) update(now int64) {
	// No window reads a latency below the shortest one the clock has
	// shown above 0. On a precise clock that changes nothing: the mean
	// of a window's fastest is at least its fastest. On a coarse one
	// (a tick of 1 or 15.6 ms, calls shorter than that) most latencies
	// read 0 and the rest a tick or two: the fastest 80% read 0, a window
	// that read nothing, and the few that read a tick or more against an
	// estimate set from such a window were taken for a queue, so the
	// limit was only ever cut, down to 4 at half load. Floored at the
	// tick, a latency that no reading can tell from it is no queue.
	l.tick = min(l.tick, l.hist.lowestPositive())
	lat, lat2 := l.hist.lowerMean(trimQ), l.hist.lowerMean(0.5)
	if l.hist.n > 0 && l.tick < histBuckets {
		lat = math.Max(lat, bucketMid(l.tick))
		lat2 = math.Max(lat2, bucketMid(l.tick))
	}
	w := window{
		limit:     l.lim,
		inflight:  float64(l.inflight),
		latency:   lat,
		latency2:  lat2,
		successes: l.hist.n,
		drops:     l.drops,
		lossy:     l.drops > max(1, int(lossTolerance*float64(l.drops+l.hist.n))),
		saturated: l.saturated,
	}
	if d := l.last - l.start; d > 0 {
		w.inflight = l.area / float64(d)
	}
	if w.lossy {
		l.lossless = 0
		if l.nwait > 0 && 2*l.lateDrops > l.drops {
			l.lifo = true
		}
	} else {
		l.lossless++
	}
	// A window's latency is worth reading when it had enough successes
	// and few drops; then, if the last one's was too, the two say how the
	// latency answered the last change of the limit.
	valid := !w.lossy && w.latency > 0 && w.successes >= max(minValid, l.cfg.minSamples/4)
	var x float64
	if d := now - l.start; d > 0 {
		x = float64(l.ends) / float64(d)
	}
	if valid && l.prevLat > 0 {
		w.moved, w.di, w.dm = l.moved, w.inflight/l.prevIn, w.latency/l.prevLat
	}
	switch {
	case valid && l.cutRun == 1:
		l.cutRun, l.runIn, l.runLat, l.runX = 2, w.inflight, w.latency, x
	case valid && l.cutRun == 2:
		w.ci, w.cm, w.cx = w.inflight/l.runIn, w.latency/l.runLat, x/l.runX
	}
	doubt := false
	if l.cfg.alg.kind != kindAIMD {
		doubt = l.estimate(&w, valid)
	}
	w.base, w.base2 = l.base, l.base2
	next := l.probe(&w, l.cfg.alg.next(&w), doubt)
	l.prevIn, l.prevLat = 0, 0
	if valid {
		l.prevIn, l.prevLat = w.inflight, w.latency
	}
	if w.lossy && l.dropAge > 0 {
		// The drops came back dropAge after their admission: the limit
		// this update sets shows its own drops no sooner. Until then a
		// window without drops says nothing about it.
		l.holdUntil = max(l.holdUntil, now+min(l.dropAge, maxHold))
	}
	if next > w.limit && now < l.holdUntil && !l.probing {
		next = w.limit
	}
	next = math.Max(float64(l.cfg.minLimit), math.Min(float64(l.cfg.maxLimit), next))
	l.lim = next
	limit := int(next)
	l.moved = 0
	if l.probing {
		l.cutRun = 0
	}
	if limit != l.limit {
		old := l.limit
		l.moved = 1
		if limit < old {
			l.moved = -1
			l.cutEpoch = now
			l.cutRun = max(l.cutRun, 1)
		} else {
			l.cutRun = 0
		}
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
	l.lateDrops = 0
	l.dropAge = 0
	l.ends = 0
	l.saturated = false
	l.topPrev, l.top = l.top, Sheddable
}

// estimate updates the no-load latency estimate from window w, whose
// latency is worth reading if valid, and reports whether w casts doubt on
// it, so that a probe should measure it now. Requires mu.
//
// Only these change the estimate: the first window sets it (and, as it
// may have queued, a probe follows at once if the limit bound in it, else
// as soon as the limit binds, unless a window of the third kind below
// moves it first and resets its age: docs/adaptive.md says what that
// costs); a probe's window, run below the knee, measures it; a window in
// which nobody waited and at most half the limit was in use, or which read
// below the estimate, moves it an eighth of the way. No window with drops,
// or just after one, counts: the backend may be busy with work its callers
// gave up on. So a long overload, whose windows all read high, cannot drag
// it up.
//
// A backend that really got slower or faster shows in how a window
// answers a change of the limit. Above the knee the latency follows the
// calls in flight and the throughput does not (Little's law); below it the
// throughput follows and the latency does not. Doubt, then:
//   - in a run of cuts (no raise or probe between them), an in-flight a
//     fifth or more below the first window after the run's first cut, with
//     a latency lowered by less than half that fraction and a throughput
//     by more, while the latency still reads above the band: the cuts went
//     below the knee and the latency stayed, so it is the no-load one and
//     the estimate is too low. (Compared with the first window after the
//     first cut, not the one before: work queued before a cut delays the
//     calls after it for a while. And over the run, not cut by cut: cuts
//     of a tenth each, at the edge of the band, add up to a collapse. But
//     read only in a window that follows a cut: a window that held the
//     limit brings no new in-flight to compare, only another noisy draw of
//     the same comparison, and enough draws of a noisy backend's latency
//     and throughput satisfy it by chance.);
//   - a raise of the in-flight by a tenth or more that the latency
//     followed by two thirds or more while it read below the estimate: a
//     queue reads as no load, the estimate is too high;
//   - two of the last three windows bound the limit yet read below 0.9 of
//     the estimate: too high as well.
func (l *Limiter) estimate(w *window, valid bool) bool {
	m := w.latency
	// The limit bound through the window, not only in bursts of a load
	// below it: then its latency says something about the limit.
	bound := w.saturated && w.inflight >= 0.75*w.limit
	l.below <<= 1
	if valid && l.base > 0 && bound && m < 0.9*l.base {
		l.below |= 1
	}
	l.below &= 7
	if l.probing {
		// A probe's window reads below the estimate it re-measures by
		// design (it runs at half the limit), and the estimate it leaves
		// makes earlier readings moot: none of them is doubt. (Counted,
		// the start-up probe's two windows set off a second probe at
		// once, another window below the knee.)
		l.below = 0
	}
	if !valid || l.base > 0 && l.lossless < 2 {
		if l.base > 0 {
			l.baseAge++
		}
		return false
	}
	r := m / l.base
	switch {
	case l.base == 0:
		l.base, l.base2 = m, w.latency2
		// The first window ramped up from nothing, at a limit that may
		// be far past the knee: if the limit bound in it, the start-up
		// probe comes now, else as soon as it binds. (After a bound
		// first window it used to come a window later, so the gradient,
		// reading the first window as its own reference, raised the
		// limit a quarter first: on the wall-clock comparison's backend
		// at 2×-5×, 40 more calls behind a queue of up to 12, which were
		// most of a 10 s run's p99.)
		l.baseAge = probeEvery - 1
		if w.saturated {
			l.baseAge = probeEvery
		}
	case l.probing:
		// The start-up probe's steps set the estimate, and so does any
		// probe that finds it more than 15% low; one that finds it more
		// than 15% high reads a second window at the same limit and sets
		// it to the two windows' pooled latency (one noisy window of a
		// backend that got faster can be a fifth off). Otherwise a probe
		// moves it a third of the way, to average out the noise of one
		// window.
		switch {
		case l.confirm == 2:
			l.base = (l.probeM*float64(l.probeN) + m*float64(w.successes)) / float64(l.probeN+w.successes)
			l.base2 = (l.probeM2*float64(l.probeN) + w.latency2*float64(w.successes)) / float64(l.probeN+w.successes)
		case l.probes == 0 || l.probeStep > 0 || r > 1+0.15:
			l.base, l.base2 = m, w.latency2
		case r < 1-0.15:
			l.base, l.base2 = m, w.latency2
			l.confirm, l.probeM, l.probeM2, l.probeN = 1, m, w.latency2, w.successes
		default:
			l.base += (m - l.base) / 3
			l.base2 += (w.latency2 - l.base2) / 3
		}
		l.baseAge = 0
	case !w.saturated && (m < l.base || w.inflight < w.limit/2):
		l.base += (m - l.base) / 8
		l.base2 += (w.latency2 - l.base2) / 8
		l.baseAge = 0
	default:
		l.baseAge++
	}
	if l.probing || !bound {
		return false
	}
	return bits.OnesCount8(l.below) >= 2 ||
		w.moved < 0 && w.ci > 0 && w.ci <= 0.8 && w.cm >= 1-(1-w.ci)/2 && w.cx <= 1-(1-w.ci)/2 && r > 1+gradHigh ||
		w.moved > 0 && w.di >= 1.1 && w.dm-1 >= (w.di-1)*2/3 && r < 1
}

// probe runs the probes of the no-load latency and returns the next limit,
// given the algorithm's choice next after window w. A probe runs one window
// at half the limit: when the limit binds, half of it is below the knee, so
// its latency is the no-load latency by construction, at little cost (the
// backend's workers stay busy; only its queue empties). A probe whose
// latency fell nearly as much as its limit did ran above the knee and
// halves again, as the start-up probe always does once (the window before
// it was the first, ramping up from nothing, not a reference). A probe that
// read more than 15% below the estimate (estimate sets confirm) reads one
// more window at the same limit before it ends, and the estimate becomes
// the two windows' pooled latency: one window of a noisy backend can read a
// fifth low. After a probe the limit goes back to where it was, but no
// further than twice the probe's. A probe starts when doubt says so, or
// when the estimate has gone probeEvery windows without one and the limit
// binds. Requires mu.
func (l *Limiter) probe(w *window, next float64, doubt bool) float64 {
	m := w.latency
	confirm := l.confirm
	l.confirm = 0
	switch {
	case l.probing && confirm == 1 && !w.lossy && m > 0 && !(m < 0.6*l.probeFrom && m < 0.85*l.probeBase):
		l.confirm = 2
		return w.limit
	case l.probing && confirm != 2 && !w.lossy && m > 0 && w.limit > float64(l.cfg.minLimit) &&
		(l.probes == 0 && l.probeStep == 0 || m < 0.6*l.probeFrom && (l.probes == 0 || m < 0.85*l.probeBase)):
		l.probeFrom, l.probeBase = m, l.base
		l.probeStep++
		return w.limit / 2
	case l.probing:
		l.probing = false
		l.probes++
		if !w.lossy {
			return math.Max(next, math.Min(l.restore, 2*w.limit))
		}
	case doubt || l.cfg.alg.kind != kindAIMD && l.base > 0 && l.baseAge >= probeEvery && w.saturated && !w.lossy:
		l.probing = true
		l.probeStep = 0
		l.restore = next
		if doubt {
			l.restore = w.limit
		}
		l.probeFrom, l.probeBase = m, l.base
		return w.limit / 2
	}
	return next
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
	Waited    uint64 // permits taken after waiting in the backlog (counted when the waiter takes it)
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
