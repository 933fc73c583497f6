//go:build !race

package adaptive

// The overload simulator: a discrete-event simulation on virtual time that
// drives a Limiter through WithClock. Backends have a known capacity and
// latency curve, arrivals are open-loop Poisson from a seeded generator,
// and every request has a deadline after which its caller gives up (the
// backend finishes the work anyway). Everything runs on one goroutine at a
// time: a caller that must wait in the backlog runs in its own goroutine,
// but the simulator hands control to exactly one of them at a time and
// takes it back when it sleeps or returns, so a run is deterministic.

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/admit-go/admit"
)

// dist is a service-time distribution.
type dist interface {
	draw(r *rand.Rand) int64
	String() string
}

type fixedDist struct{ d int64 }

func (f fixedDist) draw(*rand.Rand) int64 { return f.d }
func (f fixedDist) String() string        { return fmt.Sprintf("fixed %v", time.Duration(f.d)) }

type lognormalDist struct {
	median int64
	sigma  float64
}

func (l lognormalDist) draw(r *rand.Rand) int64 {
	return int64(float64(l.median) * math.Exp(l.sigma*r.NormFloat64()))
}
func (l lognormalDist) String() string {
	return fmt.Sprintf("lognormal median %v sigma %.2g", time.Duration(l.median), l.sigma)
}

// mixDist draws vals[i] with probability weights[i].
type mixDist struct {
	vals    []int64
	weights []float64
}

func (m mixDist) draw(r *rand.Rand) int64 {
	u := r.Float64()
	for i, w := range m.weights {
		if u < w {
			return m.vals[i]
		}
		u -= w
	}
	return m.vals[len(m.vals)-1]
}
func (m mixDist) String() string { return fmt.Sprintf("mix %v at %v", m.vals, m.weights) }

// scaled returns d with every service time multiplied by f.
func scaled(d dist, f float64) dist {
	switch d := d.(type) {
	case fixedDist:
		return fixedDist{int64(float64(d.d) * f)}
	case lognormalDist:
		return lognormalDist{int64(float64(d.median) * f), d.sigma}
	case mixDist:
		vals := make([]int64, len(d.vals))
		for i, v := range d.vals {
			vals[i] = int64(float64(v) * f)
		}
		return mixDist{vals, d.weights}
	}
	panic(fmt.Sprintf("scaled(%T)", d))
}

var (
	distFixed     = fixedDist{100 * ms}
	distLognormal = lognormalDist{100 * ms, 0.5}
	distMix       = mixDist{[]int64{40 * ms, 80 * ms, 200 * ms, 500 * ms}, []float64{0.70, 0.20, 0.07, 0.03}}
)

// noLoad returns the mean, median and 99th percentile of d, from 200,000
// draws of a fixed seed: the no-load latencies the targets are multiples of.
func noLoad(d dist) (mean, p50, p99 float64) {
	v := noLoadStats(d)
	return v[0], v[1], v[2]
}

// noLoadLower returns the mean of the fastest trimQ of d: what an update
// window measures at no load, the limiter's no-load estimate's target.
func noLoadLower(d dist) float64 { return noLoadStats(d)[3] }

func noLoadStats(d dist) [4]float64 {
	if v, ok := noLoadCache[d.String()]; ok {
		return v
	}
	r := rand.New(rand.NewPCG(7, 7))
	xs := make([]float64, 200_000)
	sum := 0.0
	for i := range xs {
		xs[i] = float64(d.draw(r))
		sum += xs[i]
	}
	slices.Sort(xs)
	keep := int(trimQ * float64(len(xs)))
	lower := 0.0
	for _, x := range xs[:keep] {
		lower += x
	}
	v := [4]float64{sum / float64(len(xs)), xs[len(xs)/2], xs[len(xs)*99/100], lower / float64(keep)}
	noLoadCache[d.String()] = v
	return v
}

// noLoadCache holds noLoadStats's results by distribution. Tests in this
// package do not run in parallel.
var noLoadCache = map[string][4]float64{}

// model is a backend: workers serving FIFO, or processor sharing.
type model struct {
	name    string
	ps      bool // processor sharing: n jobs each progress at min(1, workers/n)
	workers int
	d       dist
	// maxQueue, when positive, makes a FIFO backend refuse a job at once
	// (1 ms later, as a 503 would come back) when that many wait: the
	// caller reports it Dropped.
	maxQueue int
	// refuseAfter, when positive, is how long a refusal takes to reach
	// the caller instead of 1 ms (past the deadline: the call hangs and
	// the caller times out).
	refuseAfter int64
}

type classLoad struct {
	factor float64 // offered load as a multiple of capacity
	prio   Priority
	from   int64 // arrivals start at this time
	to     int64 // and end at this one, when positive
}

// step changes the backend at a time: its workers, and its service time
// when d is set.
type step struct {
	at      int64
	workers int
	d       dist
}

type scenario struct {
	m        model
	classes  []classLoad
	duration int64 // of the whole run
	deadline int64
	opts     []Option // the limiter's; with noLimit, no limiter at all
	noLimit  bool
	steps    []step
	seed     uint64
	// noise is the fraction of requests whose caller goes away on its own
	// (a closed tab, a cancelled job), at a uniform time within twice the
	// no-load median after arriving: a request still in flight then ends
	// its permit Dropped at once, and the backend goes on with its work.
	noise float64
	// workFrom and workTo, when workTo > 0, bound the span in which the
	// work each request gets from the backend is added up (request.work).
	workFrom, workTo int64
	// clock, when set, maps the simulation's time to what the limiter's
	// clock reads (a coarse clock, one that jumps or goes back); the
	// backend, the arrivals and the deadlines stay on the simulation's.
	clock func(now int64) int64
	// hooks run at their times (hook.at), with the simulator's control.
	hooks []hook
}

// hook is a function a scenario runs at a time: a caller that takes a
// permit and holds it, say.
type hook struct {
	at int64
	f  func(s *sim)
}

type reqState uint8

const (
	reqWaiting   reqState = iota // in Acquire
	reqShed                      // refused with admit.ErrOverloaded
	reqExpired                   // its context ended in Acquire
	reqInBackend                 // admitted, not done
	reqDone                      // done within its deadline
	reqAbandoned                 // its caller gave up at the deadline
	reqRefused                   // the backend refused it (maxQueue)
	reqLeft                      // its caller went away on its own (noise)
)

type request struct {
	class     int
	arrive    int64
	admitted  int64
	done      int64
	state     reqState
	ctx       context.Context
	cancel    context.CancelFunc
	p         *Permit
	err       error
	inflight  int   // the limiter's in-flight count right after admission
	permitLim int   // the limiter's limit at admission
	work      int64 // worker-ns the backend spent on it in [workFrom, workTo)
}

type job struct {
	r       *request
	size    int64
	finishV float64 // processor sharing: the V at which it is done
}

type evKind uint8

const (
	evArrive evKind = iota
	evDone          // a FIFO job completes
	evPS            // the processor-sharing backend's next completion
	evDeadline
	evWake // a sleeper's timer
	evStep
	evRefused // the backend's refusal reaches the caller
	evLeave   // a noise request's caller goes away
	evHook    // a scenario's hook
)

type event struct {
	t    int64
	seq  uint64
	kind evKind
	n    int // class, version, or workers
	r    *request
	j    *job
	sl   *sleeper
	d    dist // evStep: the new service time, if any
}

type evHeap []event

func (h evHeap) Len() int { return len(h) }
func (h evHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h evHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *evHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *evHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type psHeap []*job

func (h psHeap) Len() int           { return len(h) }
func (h psHeap) Less(i, j int) bool { return h[i].finishV < h[j].finishV }
func (h psHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *psHeap) Push(x any)        { *h = append(*h, x.(*job)) }
func (h *psHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	*h = old[:len(old)-1]
	return j
}

type sleeper struct {
	ctx    context.Context
	resume chan error
}

type simMsg struct {
	r        *request // set when Acquire returned
	finished bool
}

// limitPoint is one update of the limiter: its time and the new limit.
type limitPoint struct {
	t     int64
	limit int
	base  float64 // the no-load estimate after the update, ns
	n     int     // the successes of the window the update closed
}

type sim struct {
	sc      *scenario
	now     int64
	seq     uint64
	q       evHeap
	rng     *rand.Rand
	noise   *rand.Rand // draws of the noise requests, apart so that arrivals and work stay the same
	l       *Limiter
	workers int
	d       dist    // the service time now
	mean    float64 // mean service time, ns
	p50     float64 // no-load median latency, ns
	p99     float64 // no-load 99th percentile latency, ns

	busy    int
	fifo    []*job
	head    int
	serving map[*job]struct{} // FIFO jobs holding a worker, when work is added up

	ps    psHeap
	v     float64 // service each PS job has received since the start, ns
	vAt   int64
	psVer int

	reqs     []*request
	sleepers []*sleeper
	yield    chan simMsg
	updates  []limitPoint
}

type simClock struct{ s *sim }

func (c simClock) Now() int64 {
	if c.s.sc.clock != nil {
		return c.s.sc.clock(c.s.now)
	}
	return c.s.now
}

// Sleep registers a timer event and hands control back to the simulator
// until it resumes this sleeper, at the timer or when ctx ended.
func (c simClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	s := c.s
	sl := &sleeper{ctx: ctx, resume: make(chan error)}
	s.sleepers = append(s.sleepers, sl)
	s.push(event{t: s.now + int64(d), kind: evWake, sl: sl})
	s.yield <- simMsg{}
	return <-sl.resume
}

func (s *sim) push(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

func runSim(sc *scenario) *sim {
	s := &sim{sc: sc, rng: rand.New(rand.NewPCG(sc.seed, sc.seed^0x9e3779b97f4a7c15)), noise: rand.New(rand.NewPCG(sc.seed, 3)),
		workers: sc.m.workers, d: sc.m.d, yield: make(chan simMsg)}
	s.mean, s.p50, s.p99 = noLoad(sc.m.d)
	if !sc.noLimit {
		opts := append([]Option{WithClock(simClock{s})}, sc.opts...)
		l, err := New(opts...)
		if err != nil {
			panic(err)
		}
		l.testHookUpdate = func(now int64, limit int) { s.updates = append(s.updates, limitPoint{now, limit, l.base, l.hist.n}) }
		s.l = l
	}
	if sc.workTo > 0 {
		s.serving = map[*job]struct{}{}
	}
	for i, c := range sc.classes {
		s.now = c.from
		s.push(event{t: s.nextGap(i), kind: evArrive, n: i})
	}
	s.now = 0
	for _, st := range sc.steps {
		s.push(event{t: st.at, kind: evStep, n: st.workers, d: st.d})
	}
	for i, h := range sc.hooks {
		s.push(event{t: h.at, kind: evHook, n: i})
	}
	for len(s.q) > 0 {
		e := heap.Pop(&s.q).(event)
		if e.t > sc.duration+sc.deadline {
			break
		}
		if s.serving != nil && e.t > s.now {
			s.addWork(s.now, e.t)
		}
		s.now = max(s.now, e.t)
		s.handle(e)
		s.settle()
	}
	// Release the goroutines still waiting: end their contexts and let
	// them return.
	for _, r := range s.reqs {
		if r.cancel != nil {
			r.cancel()
		}
	}
	s.settle()
	return s
}

// rate returns class i's arrivals per ns at the current capacity of the
// starting backend: the load is offered against the nominal capacity.
func (s *sim) rate(i int) float64 {
	return s.sc.classes[i].factor * float64(s.sc.m.workers) / s.mean
}

func (s *sim) nextGap(i int) int64 { return s.now + int64(s.rng.ExpFloat64()/s.rate(i)) + 1 }

func (s *sim) handle(e event) {
	switch e.kind {
	case evArrive:
		if c := s.sc.classes[e.n]; e.t < s.sc.duration && (c.to == 0 || e.t < c.to) {
			s.arrive(e.n)
			s.push(event{t: s.nextGap(e.n), kind: evArrive, n: e.n})
		}
	case evDone:
		s.busy--
		delete(s.serving, e.j)
		s.complete(e.j.r)
		s.startFIFO()
	case evPS:
		if e.n != s.psVer {
			return
		}
		s.advanceV()
		for len(s.ps) > 0 && s.ps[0].finishV <= s.v+1e-3 {
			j := heap.Pop(&s.ps).(*job)
			s.complete(j.r)
		}
		s.schedulePS()
	case evDeadline:
		r := e.r
		switch r.state {
		case reqWaiting:
			r.cancel() // settle resumes its sleeper (only backlog runs wait)
		case reqInBackend:
			r.state = reqAbandoned
			if r.p != nil {
				r.p.Dropped()
			}
		}
	case evWake:
		if i := slices.Index(s.sleepers, e.sl); i >= 0 {
			s.sleepers = slices.Delete(s.sleepers, i, i+1)
			s.resume(e.sl, nil)
		}
	case evRefused:
		if r := e.r; r.state == reqInBackend {
			r.state = reqRefused
			if r.p != nil {
				r.p.Dropped()
			}
		}
	case evLeave:
		switch r := e.r; r.state {
		case reqWaiting:
			r.cancel()
		case reqInBackend:
			r.state = reqLeft
			if r.p != nil {
				r.p.Dropped()
			}
		}
	case evHook:
		s.sc.hooks[e.n].f(s)
	case evStep:
		if e.d != nil {
			s.d = e.d
		}
		if s.sc.m.ps {
			s.advanceV()
			s.workers = e.n
			s.schedulePS()
		} else {
			s.workers = e.n
			s.startFIFO()
		}
	}
}

func (s *sim) arrive(class int) {
	r := &request{class: class, arrive: s.now}
	s.reqs = append(s.reqs, r)
	if s.sc.noise > 0 && s.noise.Float64() < s.sc.noise {
		s.push(event{t: s.now + 1 + int64(s.noise.Float64()*2*s.p50), kind: evLeave, r: r})
	}
	if s.l == nil {
		s.push(event{t: s.now + s.sc.deadline, kind: evDeadline, r: r})
		r.state = reqInBackend
		r.admitted = s.now
		s.submit(r)
		return
	}
	ctx := context.Background()
	if p := s.sc.classes[class].prio; p != Normal {
		ctx = ContextWithPriority(ctx, p)
	}
	if s.l.cfg.backlog == 0 {
		// Acquire decides at once: a shed request needs no context of its
		// own and no deadline event.
		r.ctx = ctx
		r.p, r.err = s.l.Acquire(r.ctx)
		if r.err == nil {
			s.push(event{t: s.now + s.sc.deadline, kind: evDeadline, r: r})
		}
		s.acquired(r)
		return
	}
	s.push(event{t: s.now + s.sc.deadline, kind: evDeadline, r: r})
	r.ctx, r.cancel = context.WithCancel(ctx)
	go func() {
		r.p, r.err = s.l.Acquire(r.ctx)
		s.yield <- simMsg{r: r, finished: true}
	}()
	s.await()
}

// await takes control back from the goroutine that has it: when it
// returned from Acquire, its result is applied.
func (s *sim) await() {
	m := <-s.yield
	if m.finished {
		s.acquired(m.r)
	}
}

func (s *sim) resume(sl *sleeper, err error) {
	sl.resume <- err
	s.await()
}

// settle resumes, one at a time and in the order they went to sleep, the
// sleepers whose context has ended (a grant, a displacement, a deadline),
// until none is left.
func (s *sim) settle() {
	for {
		i := slices.IndexFunc(s.sleepers, func(sl *sleeper) bool { return sl.ctx.Err() != nil })
		if i < 0 {
			return
		}
		sl := s.sleepers[i]
		s.sleepers = slices.Delete(s.sleepers, i, i+1)
		s.resume(sl, sl.ctx.Err())
	}
}

func (s *sim) acquired(r *request) {
	switch {
	case r.err == nil:
		r.state = reqInBackend
		r.admitted = s.now
		r.inflight, r.permitLim = s.l.InFlight(), s.l.Limit()
		s.submit(r)
	case errors.Is(r.err, admit.ErrOverloaded):
		r.state = reqShed
	case errors.Is(r.err, context.Canceled):
		r.state = reqExpired
	default:
		panic(r.err)
	}
}

func (s *sim) submit(r *request) {
	j := &job{r: r, size: max(1, s.d.draw(s.rng))}
	if s.sc.m.ps {
		s.advanceV()
		j.finishV = s.v + float64(j.size)
		heap.Push(&s.ps, j)
		s.schedulePS()
		return
	}
	if s.sc.m.maxQueue > 0 && s.busy >= s.workers && len(s.fifo)-s.head >= s.sc.m.maxQueue {
		s.push(event{t: s.now + max(ms, s.sc.m.refuseAfter), kind: evRefused, r: r})
		return
	}
	s.fifo = append(s.fifo, j)
	s.startFIFO()
}

func (s *sim) startFIFO() {
	for s.busy < s.workers && s.head < len(s.fifo) {
		j := s.fifo[s.head]
		s.fifo[s.head] = nil
		s.head++
		s.busy++
		if s.serving != nil {
			s.serving[j] = struct{}{}
		}
		s.push(event{t: s.now + j.size, kind: evDone, j: j})
	}
	if s.head > 1024 && s.head*2 > len(s.fifo) {
		s.fifo = append(s.fifo[:0], s.fifo[s.head:]...)
		s.head = 0
	}
}

// addWork credits each job in service with the worker time it gets in
// [from, to) ∩ [workFrom, workTo): a worker each in FIFO, psRate each in
// processor sharing.
func (s *sim) addWork(from, to int64) {
	from, to = max(from, s.sc.workFrom), min(to, s.sc.workTo)
	if from >= to {
		return
	}
	dt := float64(to - from)
	if s.sc.m.ps {
		rate := s.psRate()
		for _, j := range s.ps {
			j.r.work += int64(rate * dt)
		}
		return
	}
	for j := range s.serving {
		j.r.work += int64(dt)
	}
}

// psRate is the service rate of each PS job: one worker's worth, shared
// when there are more jobs than workers.
func (s *sim) psRate() float64 {
	n := len(s.ps)
	if n <= s.workers {
		return 1
	}
	return float64(s.workers) / float64(n)
}

func (s *sim) advanceV() {
	if len(s.ps) > 0 {
		s.v += s.psRate() * float64(s.now-s.vAt)
	}
	s.vAt = s.now
}

func (s *sim) schedulePS() {
	s.psVer++
	if len(s.ps) == 0 {
		return
	}
	dt := (s.ps[0].finishV - s.v) / s.psRate()
	s.push(event{t: s.now + int64(math.Ceil(max(0, dt))), kind: evPS, n: s.psVer})
}

func (s *sim) complete(r *request) {
	if r.state != reqInBackend {
		return // abandoned: the work is done, nobody waits for it
	}
	r.state = reqDone
	r.done = s.now
	if r.p != nil {
		r.p.Success()
	}
}

// metrics is what the requests that arrived in [from, to) saw.
//
// The admitted latency (p50, p99) is one definition throughout: the time
// from a request's admission (its permit handed out) to its completion,
// the span a Permit measures and the limit controls, over the requests
// admitted; one admitted and then abandoned at its deadline counts as
// infinitely slow. A wait in the backlog before admission is reported
// apart (waitP50, waitP99), and so is what the caller saw, arrival to
// completion (e2eP50, e2eP99); the deadline, and so the goodput, runs
// from arrival. Without a backlog nobody waits and the three coincide.
type metrics struct {
	offered, good, shed, expired, abandoned, refused, left int
	goodput                                                float64 // completions within deadline ÷ capacity
	p50, p99                                               float64 // admitted latency ÷ no-load p50, p99
	rawP50, rawP99                                         float64 // admitted latency, ns
	waitP50, waitP99                                       float64 // the backlog wait of admitted requests, ns
	e2eP50, e2eP99                                         float64 // arrival to completion ÷ no-load p50, p99
	rejected                                               float64 // shed and expired ÷ offered
}

func (m metrics) String() string {
	s := fmt.Sprintf("offered %d goodput %.3f p50 %.2fx p99 %.2fx (%v, %v) rejected %.4f abandoned %d",
		m.offered, m.goodput, m.p50, m.p99, simDur(m.rawP50), simDur(m.rawP99), m.rejected, m.abandoned)
	if m.waitP99 > 0 {
		s += fmt.Sprintf("; waited p50 %v p99 %v, arrival to completion p50 %.2fx p99 %.2fx",
			time.Duration(m.waitP50).Round(time.Millisecond), time.Duration(m.waitP99).Round(time.Millisecond), m.e2eP50, m.e2eP99)
	}
	return s
}

// simDur prints a latency in ns to the millisecond; +Inf, a request
// abandoned at its deadline, as "timeout".
func simDur(ns float64) string {
	if math.IsInf(ns, 1) {
		return "timeout"
	}
	return time.Duration(ns).Round(time.Millisecond).String()
}

// measure computes the metrics of the requests of the given classes (all
// if none) that arrived in [from, to); capacity is in completions per ns.
func (s *sim) measure(from, to int64, capacity float64, classes ...int) metrics {
	var m metrics
	var lat, wait, e2e []float64
	for _, r := range s.reqs {
		if r.arrive < from || r.arrive >= to || (len(classes) > 0 && !slices.Contains(classes, r.class)) {
			continue
		}
		m.offered++
		switch r.state {
		case reqShed:
			m.shed++
		case reqExpired:
			m.expired++
		case reqDone:
			m.good++
			lat = append(lat, float64(r.done-r.admitted))
			e2e = append(e2e, float64(r.done-r.arrive))
		case reqAbandoned, reqInBackend:
			m.abandoned++
			lat = append(lat, math.Inf(1))
			e2e = append(e2e, math.Inf(1))
		case reqRefused:
			m.refused++
		case reqLeft:
			m.left++
		}
		if r.state >= reqInBackend {
			wait = append(wait, float64(r.admitted-r.arrive))
		}
	}
	m.goodput = float64(m.good) / (capacity * float64(to-from))
	if m.offered > 0 {
		m.rejected = float64(m.shed+m.expired) / float64(m.offered)
	}
	if len(lat) > 0 {
		m.rawP50, m.rawP99 = pct(lat, 0.50), pct(lat, 0.99)
		m.p50, m.p99 = m.rawP50/s.p50, m.rawP99/s.p99
		m.e2eP50, m.e2eP99 = pct(e2e, 0.50)/s.p50, pct(e2e, 0.99)/s.p99
	}
	if len(wait) > 0 {
		m.waitP50, m.waitP99 = pct(wait, 0.50), pct(wait, 0.99)
	}
	return m
}

// pct returns the q-quantile of xs, q in hundredths (nearest rank,
// rounding down), sorting xs in place.
func pct(xs []float64, q float64) float64 {
	slices.Sort(xs)
	return xs[(len(xs)-1)*int(q*100)/100]
}

// capacity returns the backend's completions per ns with w workers.
func (s *sim) capacity(w int) float64 { return float64(w) / s.mean }
