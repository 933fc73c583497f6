// Package adaptive implements an adaptive concurrency limiter: a limit on
// how many calls may be in flight at once to a backend, learned from how
// the calls go, so that it follows the backend's capacity as it changes,
// sheds what the backend cannot serve in time, and sheds the lower
// priorities first.
//
// A rate limit answers "how often"; a concurrency limit answers "how many
// at once", which is what a saturated backend runs out of: by Little's law
// its calls in flight are its throughput times its latency, and past its
// knee (workers, cores, connections) every extra call only waits. A fixed
// limit is wrong the day the backend gets slower or faster; this one finds
// the knee.
//
// # Use
//
//	l, err := adaptive.New()          // Gradient, no backlog, limit 20 to start
//	p, err := l.Acquire(ctx)          // an error wrapping admit.ErrOverloaded: shed
//	...                                // the call
//	p.Success()                       // or p.Dropped() (timeout, overload), p.Ignore()
//
// Each permit is ended exactly once: Success makes its latency a sample,
// Dropped reports a loss (a timeout, or the backend saying it is
// overloaded), Ignore only releases. admithttp.Concurrency and admitgrpc's
// UnaryServerConcurrency and StreamServerConcurrency do this for servers,
// and admitotel.ObserveAdaptive exports the decisions and the limit.
//
// # The algorithm
//
// Outcomes are gathered in update windows: a window closes when it holds
// max(40, 2·limit) outcomes (successes of permits taken since the limit last
// changed, drops of those taken since it was last cut; about two round
// trips when the limit binds), or eight round trips'
// worth (by Little's law, as many per round trip as calls in flight), at
// least 10, so that at a low rate of calls the limit still moves every
// second or so; or at 40 drops (WithMinSamples sets the 40 and the 10);
// never with fewer than 5. Successes of permits taken before the last
// change of the limit are not samples: they saw another limit. Drops of
// permits taken before the last cut do not count: a drop arrives a
// deadline after its admission, and the cut answered it; a raise answers
// nothing, so drops from before one still count. Drops count as a loss only above 5% of
// a window's outcomes: callers that go away on their own, and calls that
// can never finish in time, must not drive the limit down. After a lossy
// window, no raise comes until the age of its drops (admission to drop,
// at most 30 s) has passed again: the limit it set shows its own drops no
// sooner.
//
// The latency of a window is the mean of its fastest 80% of successes:
// robust to a heavy tail, and unlike a quantile it moves smoothly with the
// queueing delay that every call of a saturated backend shares. It is
// compared with the no-load latency b. The first window sets b; then
// probes measure it, the first right after that window if the limit bound
// in it (else as soon as the limit binds): one window at half the limit,
// below the knee when the
// limit binds, where the latency is b by construction (at start-up, and
// whenever a probe's latency halved with its limit, it halves again; one
// that reads more than 15% below b reads a second window, and b becomes the
// two windows' pooled latency; a probe's window whose latencies all lie
// within about a sixth of each other, a steady backend's, closes after
// 2·limit of them rather than the full count, to idle the workers less).
// Besides probes, only a window in which
// nobody was shed or waited, and which used at most half the limit or read
// below b, moves b, an eighth of the way: there no queue of this
// limiter's making is in the reading. A long overload, whose windows all
// read slow and shed, cannot drag b up (the failure of a baseline that
// averages recent latencies: it climbs toward the overloaded latency and
// the limiter stops shedding), and no window with drops beyond the
// tolerance, or just after one, moves b at all. A probe comes when b has gone 200 windows without a
// measurement and the limit binds, and at once when a window contradicts
// b: above the knee the latency follows
// the calls in flight and the throughput does not, below it the reverse, so
// a run of cuts that lowered the throughput and not the latency says b is
// too low (the backend got slower; read in the window after a cut, not
// again in every window that holds the limit, where noise alone would
// satisfy it in time), and a raise the latency followed while it read below
// b, or windows reading below 0.9·b while the limit bound, say it is too
// high (the backend got faster). A probe's own windows, below the knee by
// design, are no such evidence.
//
// Gradient (the default) reads r = latency/b. Above 1.5 with the limit
// binding, it cuts the limit in one step towards the knee the queue
// implies (in-flight/r, to the middle of its band), at most by 30%; below
// 1.15 with the limit binding, it raises it, by a quarter when no queue is
// visible (r near 1, or a last raise the latency did not follow), else by
// what would bring r to 1.15, and never far above the calls actually in
// flight; in between it holds. A window with drops beyond the tolerance
// cuts the limit by a tenth, whatever the latency, and one whose calls
// were all lost halves it. Vegas moves the limit by max(1, log10 L) per
// window on the queue estimate I·(1−b/latency), I the calls in flight,
// and AIMD learns from drops alone.
//
// # Measured
//
// The package's tests run a discrete-event simulation on virtual time
// (WithClock): backends of 8 workers serving FIFO with fixed, lognormal
// and a heavy-tailed mixed service time, and processor sharing, work not
// cancelled when its caller gives up, open-loop Poisson arrivals, 1 s
// deadlines. The latency of an admitted call is measured from its
// admission (its permit) to its completion; a wait in the backlog is
// measured apart. With the defaults, at 2×, 3× and 5× the capacity, every
// model keeps at least 90% of its capacity as goodput (no limiter: none at
// all), with the admitted p50 within 2× and p99 within 2.5× of the
// no-load ones; at half load it rejects nothing; after the capacity halves
// or doubles, or the backend's service time doubles or halves, it is
// within those targets by the 10th window; the no-load estimate stays
// within 2% through a hundred windows of 5× overload. docs/adaptive.md in
// the repository has the numbers, what is out of any limiter's reach, the
// wall-clock comparison with failsafe-go's adaptivelimiter and the plots.
//
// # Priorities and the backlog
//
// A caller's priority (ContextWithPriority: Critical, High, Normal by
// default, Low, Sheddable) decides who is shed first. Without a backlog,
// each priority below the highest that asked in the current or the last
// update window leaves an eighth of the limit per level to those above it,
// rounded up (Normal keeps out of the last eighth when High callers are
// about, Low out of the last quarter; at a limit of 2, Normal keeps out of
// the last permit), but keeps one permit for itself, while traffic of a
// single priority has the whole limit. WithBacklog lets callers wait instead, for at most its
// maxWait and never past their context: every priority may then use the
// whole limit, waiters are served highest priority first (oldest first
// within a priority, newest first while the waits are making the calls
// they admit miss their deadlines: see WithBacklog), and a full backlog
// makes room for a higher priority by shedding the lowest priority's
// waiter that would be served last.
//
// # Cost
//
// Acquire and a permit's end each take one mutex for a few dozen
// instructions and read the clock once; the window update runs once per
// window under the same mutex. The path that admits at once allocates
// nothing (the Permit lives in the caller's frame when it does not escape
// it); shedding allocates its error, waiting a context and a waiter. A
// Limiter is about 4.5 KiB (4624 bytes on amd64, TestLimiterSize; New takes
// 4864 bytes of heap, the allocator's size class above that), most of it
// one fixed histogram of the window's latencies, and its backlog holds at
// most WithBacklog's n waiters. It starts no goroutine.
package adaptive
