// Command overload is the wall-clock side-by-side of the adaptive
// concurrency limiters: a real net/http server on 127.0.0.1 whose handler
// is a backend of -workers workers, each call holding one for -service
// (FIFO, a sleep: the backend's capacity is workers/service whatever the
// CPU does, and work goes on after its caller gave up), driven by an
// open-loop Poisson load (tsenart/vegeta's attacker with a seeded
// exponential pacer) whose clients give up after -deadline.
//
// In front of the backend, in turn: no limiter; a fixed limit of c and of
// 2c (chanpool, shedding at once); failsafe-go's adaptivelimiter with its
// defaults, and tuned as its documentation's basic usage shows (limits 1 to
// 100 from 20, recent window 1 s to 30 s with 50 samples, baseline window
// 10, queueing 2 to 3), each through failsafe-go's own executor; and
// admit's adaptive with its defaults (through admithttp.Concurrency). Each
// sheds with 503. Both adaptive limiters are told the same outcomes: a
// request whose context ended while it ran (its client gave up) ends with
// failsafe-go's Drop (which releases the permit and discards the sample) or
// admit's Dropped (a loss, which may cut the limit), any other with Record
// or Success; admithttp would also count a 429 or 5xx as a loss, and this
// backend answers neither to a call it serves.
//
// Three experiments: offered load 1× to 5× the capacity, for goodput (200s
// within the deadline ÷ capacity, counted by the requests sent during the
// run, and by those that also finished during it) and the p50 and p99 of
// the requests not shed (a timed-out one counts as infinitely slow, as in
// the package's simulator); a capacity step at 2× the full capacity (c →
// c/2 after a third of the run, back to c after two thirds, each change
// taking effect at once however many calls wait at the backend), for the
// limit and the p99 over time; and a sustained 2× overload of the adaptive
// limiters alone. Each run reports the CPU the whole process
// used (server, backend and load generator), in cores: well under the
// machine's, what is measured is the limiters. At the end of a run the
// backend drops the calls still waiting for a worker, so that a collapsed
// run (no limiter at 5×) leaves nothing behind for the next. Writes the
// tables (with the machine's description) to
// -save/overload-<date>-<host>-<commit>.txt and the plots to
// -save/plots/overload-*.svg. Run from the bench directory:
//
//	go run ./cmd/overload [-duration 10s] [-step 30s] [-save ../results]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/admit-go/admit/adaptive"
	"github.com/admit-go/admit/admithttp"
	"github.com/admit-go/admit/chanpool"
	"github.com/admit-go/admit/internal/provenance"
)

var (
	workers  = flag.Int("workers", 8, "the backend's workers (c)")
	service  = flag.Duration("service", 40*time.Millisecond, "each call's service time")
	deadline = flag.Duration("deadline", 400*time.Millisecond, "the client's timeout")
	duration = flag.Duration("duration", 10*time.Second, "length of each load run")
	stepDur  = flag.Duration("step", 30*time.Second, "length of the capacity-step run (0: none)")
	longDur  = flag.Duration("sustained", 60*time.Second, "length of the sustained 2x run of the adaptive limiters (0: none)")
	loadsArg = flag.String("loads", "1,2,3,4,5", "offered loads, multiples of the capacity")
	save     = flag.String("save", "", "write the result and plots under this directory")
	seed     = flag.Uint64("seed", 1, "the arrivals' seed")
	only     = flag.String("impls", "", "comma-separated implementations to run (default: all)")
)

// backend is c workers serving FIFO: a call waits in a queue for a worker
// (first in, first out), holds it for the service time, and is not
// cancelled when its caller goes away. The number of usable workers is kept
// apart from the queue, so that a change takes effect at once whatever
// waits: lowering it starts no queued call until fewer than the new number
// are in service (the calls already in service finish), raising it starts
// queued calls right away.
type backend struct {
	work func(*http.Request) // one call's service: *service of sleep

	mu      sync.Mutex
	workers int         // usable workers now
	busy    int         // calls in service
	queue   []chan bool // the calls waiting for a worker, oldest first: sent true when one starts, false when the run ends
	closed  bool        // the run ended: calls still waiting were dropped
	started int         // calls that began service
	peak    int         // the most calls in service as one began, since the last setWorkers
}

func newBackend(c int) *backend {
	return &backend{work: func(*http.Request) { time.Sleep(*service) }, workers: c}
}

// setWorkers changes the usable workers, at once: calls already in service
// go on, and a call starts only while fewer than n are in service.
func (b *backend) setWorkers(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.workers = n
	b.peak = 0
	b.dispatch()
}

// close ends the run: calls still waiting for a worker return at once,
// unserved (their callers are long gone).
func (b *backend) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, ch := range b.queue {
		ch <- false
	}
	b.queue = nil
}

// start counts a call into service; b.mu is held.
func (b *backend) start() {
	b.busy++
	b.started++
	b.peak = max(b.peak, b.busy)
}

// dispatch starts waiting calls, oldest first, while a worker is free;
// b.mu is held.
func (b *backend) dispatch() {
	for len(b.queue) > 0 && b.busy < b.workers {
		ch := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.start()
		ch <- true
	}
}

// backendStats is a snapshot of the backend's counters.
type backendStats struct {
	busy, waiting, started, peak int
}

func (b *backend) stats() backendStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return backendStats{busy: b.busy, waiting: len(b.queue), started: b.started, peak: b.peak}
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case len(b.queue) == 0 && b.busy < b.workers:
		b.start()
		b.mu.Unlock()
	default:
		ch := make(chan bool, 1)
		b.queue = append(b.queue, ch)
		b.mu.Unlock()
		if !<-ch {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
	}
	b.work(r)
	b.mu.Lock()
	b.busy--
	b.dispatch()
	b.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// impl is one limiter in front of the backend; limit reports its current
// limit (0 when it has none).
type impl struct {
	name     string
	adaptive bool // learns its limit: runs the sustained experiment too
	mw       func() (func(http.Handler) http.Handler, func() int)
}

var impls = []impl{
	{"none", false, func() (func(http.Handler) http.Handler, func() int) {
		return func(h http.Handler) http.Handler { return h }, func() int { return 0 }
	}},
	{"fixed-c", false, func() (func(http.Handler) http.Handler, func() int) { return fixed(*workers) }},
	{"fixed-2c", false, func() (func(http.Handler) http.Handler, func() int) { return fixed(2 * *workers) }},
	{"failsafe-default", true, func() (func(http.Handler) http.Handler, func() int) {
		return failsafeMW(adaptivelimiter.NewWithDefaults[any]())
	}},
	{"failsafe-tuned", true, func() (func(http.Handler) http.Handler, func() int) {
		return failsafeMW(failsafeTuned(0))
	}},
	{"failsafe-wait100ms", true, func() (func(http.Handler) http.Handler, func() int) {
		return failsafeMW(failsafeTuned(100 * time.Millisecond))
	}},
	{"admit-adaptive", true, func() (func(http.Handler) http.Handler, func() int) {
		l, err := adaptive.New()
		check(err)
		return admithttp.Concurrency(l), l.Limit
	}},
}

// failsafeTuned is failsafe-go's limiter tuned as its documentation's
// basic usage shows, and, if maxWait > 0, with that maximum wait in its
// queue: a quarter of the clients' deadline in failsafe-wait100ms, this
// harness's choice, not the documentation's. Without one its queue
// outwaits the clients (about (1+3)·L/200 s at a limit of L) and the tuned
// run collapses by construction.
func failsafeTuned(maxWait time.Duration) adaptivelimiter.AdaptiveLimiter[any] {
	b := adaptivelimiter.NewBuilder[any]().
		WithLimits(1, 100, 20).
		WithRecentWindow(time.Second, 30*time.Second, 50).
		WithBaselineWindow(10).
		WithQueueing(2, 3)
	if maxWait > 0 {
		b = b.WithMaxWaitTime(maxWait)
	}
	return b.Build()
}

func fixed(n int) (func(http.Handler) http.Handler, func() int) {
	p, err := chanpool.New(n, func(context.Context) (struct{}, error) { return struct{}{}, nil })
	check(err)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			lease, ok := p.TryAcquire()
			if !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			defer lease.Release()
			next.ServeHTTP(w, r)
		})
	}, func() int { return n }
}

// failsafeMW is failsafe-go's limiter used through its own executor, as
// its policies are meant to be used: failsafe.With(l) run with the
// request's context. The executor acquires as the limiter's configuration
// says: built without WithQueueing (the defaults) it rejects at once when
// the limit is full, with WithQueueing it waits in the queue its rejection
// factors allow (here until the client gives up). It then calls Drop when
// the request's context ended while the handler ran (its client gave up)
// and Record otherwise. This departs from failsafehttp.NewHandler, whose
// executor runs on context.Background(): there a client that gave up is
// Recorded with its whole duration, and a queued waiter stays queued after
// its client left; the request's context gives failsafe-go what admithttp
// gives admit. (Calling the limiter's blocking AcquirePermit directly, as
// this harness did until 2026-12-07, makes the defaults queue without
// bound: not their documented behaviour.)
func failsafeMW(l adaptivelimiter.AdaptiveLimiter[any]) (func(http.Handler) http.Handler, func() int) {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			err := failsafe.With[any](l).WithContext(r.Context()).Run(func() error {
				next.ServeHTTP(w, r)
				return nil
			})
			if err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
	}, l.Limit
}

// poissonPacer is a vegeta pacer of exponential gaps at rate per second,
// from a seeded generator, that stops after the last arrival within until:
// the same arrivals for every implementation, every one of them sent and
// none after the run. (Stopping on vegeta's duration instead sent the
// first arrival after the run's end too, and left out the last ones within
// it whenever the sender ran late at the end, so the count of requests
// differed from one implementation to the next.)
type poissonPacer struct {
	rate  float64
	until time.Duration
	mu    sync.Mutex
	rng   *rand.Rand
	at    []time.Duration // arrival times drawn so far
}

func poisson(rate float64, seed uint64, until time.Duration) *poissonPacer {
	return &poissonPacer{rate: rate, until: until, rng: rand.New(rand.NewPCG(seed, 7))}
}

func (p *poissonPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for uint64(len(p.at)) <= hits {
		last := time.Duration(0)
		if len(p.at) > 0 {
			last = p.at[len(p.at)-1]
		}
		p.at = append(p.at, last+time.Duration(p.rng.ExpFloat64()/p.rate*float64(time.Second)))
	}
	if p.at[hits] > p.until {
		return 0, true
	}
	return max(0, p.at[hits]-elapsed), false
}

func (p *poissonPacer) Rate(time.Duration) float64 { return p.rate }

// load sends the arrivals of p to url (a GET each) as attack does: an
// open-loop vegeta attacker, its clients giving up after -deadline, that
// stops when p does.
func load(url string, p *poissonPacer, name string) <-chan *vegeta.Result {
	targeter := vegeta.NewStaticTargeter(vegeta.Target{Method: "GET", URL: url})
	atk := vegeta.NewAttacker(vegeta.Timeout(*deadline), vegeta.KeepAlive(true), vegeta.MaxWorkers(4096), vegeta.Workers(64))
	return atk.Attack(targeter, p, 0, name) // no duration: p stops at the run's end
}

// run is what one load run measured. Every request sent (offered) was
// either shed (answered 503) or admitted (not shed: offered − shed), and an
// admitted one was answered 200 (ok), timed out (its client gave up at the
// deadline: served late, or still waiting at the backend or in a
// limiter's queue) or failed otherwise (errors: any other status, a
// connection error). Its latencies are of the ok and the timed-out ones,
// a timed-out one counting as infinitely slow (timedOut) as in the
// package's simulator; errors are counted apart and enter neither the
// latencies nor the timeouts.
type run struct {
	goodput  float64
	doneIn   float64 // as goodput, counting only requests that also finished within the run
	limitMed int     // the median of the limit sampled every 100 ms
	p50, p99 time.Duration
	offered  int
	admitted int     // offered − shed
	shed     int     // 503
	ok       int     // 200
	timeouts int     // the client's timeout
	errors   int     // anything else
	firstErr string  // the first error's message
	cpu      float64 // cores the process used, on average
	wall     time.Duration
	dur      time.Duration // the run's length
	series   []sample
	byTick   map[int][]time.Duration // latencies of the requests sent in each tick (k: sent in [k, k+1) ticks), not shed and not failed
}

// tick is how often a run samples the limit, and the bins of byTick.
const tick = 100 * time.Millisecond

// sample is the limiter's limit at t into a run.
type sample struct {
	t     time.Duration
	limit int
}

func attack(im impl, factor float64, dur time.Duration, steps bool) run {
	b := newBackend(*workers)
	mw, limit := im.mw()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	srv := &http.Server{Handler: mw(b)}
	go srv.Serve(ln)
	defer srv.Close()
	defer b.close()
	cpu0, wall0 := processCPU(), time.Now()

	capacity := float64(*workers) / service.Seconds()
	start := time.Now()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	var series []sample
	wg.Add(1)
	go func() {
		defer wg.Done()
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		phase := 0
		for range ticker.C {
			if stop.Load() {
				return
			}
			el := time.Since(start)
			if steps && phase == 0 && el >= dur/3 {
				b.setWorkers(*workers / 2)
				phase = 1
			}
			if steps && phase == 1 && el >= 2*dur/3 {
				b.setWorkers(*workers)
				phase = 2
			}
			mu.Lock()
			series = append(series, sample{t: el, limit: limit()})
			mu.Unlock()
		}
	}()
	var lat []time.Duration
	var r run
	perTick := map[int][]time.Duration{}
	for res := range load("http://"+ln.Addr().String()+"/", poisson(factor*capacity, *seed, dur), im.name) {
		r.offered++
		l := res.Latency
		switch classify(res) {
		case done:
			r.ok++
			if l <= *deadline {
				r.goodput++
				if res.Timestamp.Add(l).Sub(start) <= dur {
					r.doneIn++
				}
			}
		case shed:
			r.shed++
			continue
		case timeout:
			r.timeouts++
			l = timedOut
		default:
			if r.errors++; r.firstErr == "" {
				r.firstErr = fmt.Sprintf("status %d: %s", res.Code, res.Error)
			}
			continue
		}
		lat = append(lat, l)
		tk := int(res.Timestamp.Sub(start) / tick)
		perTick[tk] = append(perTick[tk], l)
	}
	r.admitted = r.offered - r.shed
	stop.Store(true)
	wg.Wait()
	r.wall = time.Since(wall0)
	r.cpu = (processCPU() - cpu0).Seconds() / r.wall.Seconds()
	capWork := capacity * dur.Seconds() // completions the backend could make
	if steps {
		capWork = capacity * dur.Seconds() * (1.0/3 + 0.5/3 + 1.0/3)
	}
	r.goodput /= capWork
	r.doneIn /= capWork
	var lims []int
	for _, x := range series {
		lims = append(lims, x.limit)
	}
	if len(lims) > 0 {
		slices.Sort(lims)
		r.limitMed = lims[len(lims)/2]
	}
	r.p50, r.p99 = pct(lat, 0.5), pct(lat, 0.99)
	r.dur = dur
	r.series = series
	r.byTick = perTick
	return r
}

// outcome is what became of one request.
type outcome int

const (
	done    outcome = iota // answered 200
	shed                   // answered 503
	timeout                // the client gave up at its deadline
	failed                 // anything else: another status, a connection error
)

// classify files one result: 200, 503, the client's timeout (net/http's
// error for a Client.Timeout, awaiting the headers or reading the body),
// or anything else.
func classify(res *vegeta.Result) outcome {
	switch {
	case res.Code == http.StatusOK && res.Error == "":
		return done
	case res.Code == http.StatusServiceUnavailable:
		return shed
	case res.Code == 0 && strings.Contains(res.Error, "Client.Timeout"):
		return timeout
	}
	return failed
}

// summary is the line that heads a capacity-step or sustained run's rows:
// its goodput, also counted by the requests that finished within the run
// (as the load table's in-run: the goodput alone credits a limiter with
// the calls it still holds at the end, about L/5,000 of the 30 s step for
// a limit of L), the p50 and p99 of the requests not shed, and the CPU.
func summary(name string, r run) string {
	return fmt.Sprintf("%s: goodput %.3f in-run %.3f p50 %s p99 %s cpu %.2f%s", name, r.goodput, r.doneIn, fmtLat(r.p50, 0), fmtLat(r.p99, 0), r.cpu, errNote(r))
}

// errNote is "" for a run without errors, else their count and the first.
func errNote(r run) string {
	if r.errors == 0 {
		return ""
	}
	return fmt.Sprintf(" errors %d (in no latency), the first %s", r.errors, r.firstErr)
}

// timedOut is the latency of a request that timed out.
const timedOut = time.Duration(1<<63 - 1)

// fmtLat formats a latency, or its multiple of the service time when
// service is set: a timed-out one as "timeout" or ">deadline/service".
func fmtLat(d time.Duration, service time.Duration) string {
	switch {
	case d == timedOut && service > 0:
		return fmt.Sprintf(">%.1f", float64(*deadline)/float64(service))
	case d == timedOut:
		return "timeout"
	case service > 0:
		return fmt.Sprintf("%.2f", float64(d)/float64(service))
	}
	return d.Round(100 * time.Microsecond).String()
}

// pct is the q-quantile of xs by nearest rank: the ⌈q·n⌉-th smallest of
// n (so the p99 of fewer than 100 is their maximum); 0 for none.
func pct(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(q*float64(len(s)) - 1e-9))
	return s[max(0, min(len(s), rank)-1)]
}

func main() {
	began := time.Now()
	flag.Parse()
	var loads []float64
	for _, f := range strings.Split(*loadsArg, ",") {
		var x float64
		_, err := fmt.Sscan(f, &x)
		check(err)
		loads = append(loads, x)
	}
	var buf bytes.Buffer
	out := io.MultiWriter(os.Stdout, &buf)
	commit, _ := provenance.Commit() // the file is named after the commit the header names
	provenance.Write(out, fmt.Sprintf("%s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH),
		"cd bench && go run ./cmd/overload "+strings.Join(os.Args[1:], " "))
	fmt.Fprintf(out, "gomaxprocs: %d (server, backend and load generator in one process)\n", runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "backend: %d workers x %v (capacity %.0f/s), client deadline %v, Poisson arrivals seed %d\n\n",
		*workers, *service, float64(*workers)/service.Seconds(), *deadline, *seed)

	if *only != "" {
		keep := strings.Split(*only, ",")
		impls = slices.DeleteFunc(impls, func(im impl) bool { return !slices.Contains(keep, im.name) })
		if len(impls) == 0 {
			check(fmt.Errorf("-impls %q names no implementation", *only))
		}
	}
	results := map[string][]run{}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "offered = admitted + shed (503); admitted = ok (200) + timeout (the client's, at %v) + err (anything else)\n", *deadline)
	var errs []string
	fmt.Fprintf(tw, "load\timpl\toffered\tadmitted\tshed\tok\ttimeout\terr\tgoodput\tin-run\tp50\tp99\tp50/S\tp99/S\tlimit\tcpu\t\n")
	for _, f := range loads {
		for _, im := range impls {
			r := attack(im, f, *duration, false)
			results[im.name] = append(results[im.name], r)
			if r.errors > 0 {
				errs = append(errs, fmt.Sprintf("  %gx %s: %d, the first %s", f, im.name, r.errors, r.firstErr))
			}
			fmt.Fprintf(tw, "%gx\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%s\t%s\t%s\t%s\t%d\t%.2f\t\n", f, im.name, r.offered, r.admitted, r.shed, r.ok, r.timeouts, r.errors, r.goodput, r.doneIn,
				fmtLat(r.p50, 0), fmtLat(r.p99, 0), fmtLat(r.p50, *service), fmtLat(r.p99, *service), r.limitMed, r.cpu)
			fmt.Fprintf(os.Stderr, "overload: %gx %s took %v\n", f, im.name, r.wall.Round(time.Millisecond))
		}
	}
	tw.Flush()
	if len(errs) > 0 {
		fmt.Fprintf(out, "errors (neither 200, 503 nor the client's timeout; in no latency):\n%s\n", strings.Join(errs, "\n"))
	}
	if *stepDur > 0 {
		fmt.Fprintf(out, "\ncapacity step at 2x: %d workers, %d from %v, %d from %v; per second: the limit at its end, the p99 of the requests not shed sent in it\n",
			*workers, *workers/2, *stepDur/3, *workers, 2**stepDur/3)
	}
	steps := map[string]run{}
	for _, im := range impls {
		if *stepDur <= 0 {
			break // -step 0: no capacity-step run
		}
		r := attack(im, 2, *stepDur, true)
		steps[im.name] = r
		fmt.Fprintln(out, summary(im.name, r))
		segs := segments(r, time.Second)
		row(out, "limit", segs, func(sg segment) string { return sg.limit(sg.last) })
		row(out, "p99/ms", segs, func(sg segment) string { return ms(pct(sg.lat, 0.99)) })
	}
	var sustained map[string]run
	if *longDur > 0 {
		sustained = map[string]run{}
		seg := 10 * time.Second
		fmt.Fprintf(out, "\nsustained 2x for %v, the adaptive limiters: goodput, p50 and p99 (of requests not shed) and the lowest limit (sampled every 100 ms) per %v, the limit every 5 s\n", *longDur, seg)
		for _, im := range impls {
			if !im.adaptive {
				continue
			}
			r := attack(im, 2, *longDur, false)
			sustained[im.name] = r
			fmt.Fprintln(out, summary(im.name, r))
			segs := segments(r, seg)
			capSeg := float64(*workers) / service.Seconds() * seg.Seconds()
			row(out, "goodput", segs, func(sg segment) string { return fmt.Sprintf("%.3f", float64(sg.good)/capSeg) })
			row(out, "p50/ms", segs, func(sg segment) string { return ms(pct(sg.lat, 0.5)) })
			row(out, "p99/ms", segs, func(sg segment) string { return ms(pct(sg.lat, 0.99)) })
			row(out, "lowest limit", segs, func(sg segment) string { return sg.limit(sg.lowest) })
			row(out, "limit", segments(r, 5*time.Second), func(sg segment) string { return sg.limit(sg.last) })
		}
	}
	fmt.Fprintf(out, "\nloadavg-at-end: %s\nwall: %v\n", provenance.LoadAvg(), time.Since(began).Round(time.Second))
	if *save != "" {
		host, _ := os.Hostname()
		path := filepath.Join(*save, fmt.Sprintf("overload-%s-%s-%s.txt", time.Now().Format("2006-01-02"), host, commit))
		check(os.WriteFile(path, buf.Bytes(), 0o644))
		fmt.Fprintln(os.Stderr, "overload: wrote", path)
		check(plots(filepath.Join(*save, "plots"), loads, results, steps, sustained))
	}
}

// segment is what a run saw over one stretch of its length: of the
// requests sent in it, how many were answered within the deadline and the
// latencies of those not shed; of the limit sampled in it, the lowest and
// the last (the limit at its end).
type segment struct {
	good         int
	lat          []time.Duration
	sampled      bool
	lowest, last int
}

// limit formats one of sg's limits, "-" if none was sampled in it.
func (sg segment) limit(l int) string {
	if !sg.sampled {
		return "-"
	}
	return fmt.Sprint(l)
}

// segments cuts r into its whole stretches of length seg (a multiple of
// tick), binned by time, not by sample index: the requests by when they
// were sent, the limit by when it was sampled (a sample about k ticks in
// closes tick k-1), so that a sample the ticker dropped shifts nothing.
func segments(r run, seg time.Duration) []segment {
	per := int(seg / tick)
	out := make([]segment, int(r.dur/seg))
	for k, lat := range r.byTick {
		if i := k / per; k >= 0 && i < len(out) {
			for _, l := range lat {
				if l <= *deadline {
					out[i].good++
				}
			}
			out[i].lat = append(out[i].lat, lat...)
		}
	}
	for _, s := range r.series { // in time order
		k := int((s.t+tick/2)/tick) - 1
		if i := k / per; k >= 0 && i < len(out) {
			sg := &out[i]
			if !sg.sampled {
				sg.sampled, sg.lowest = true, s.limit
			}
			sg.lowest, sg.last = min(sg.lowest, s.limit), s.limit
		}
	}
	return out
}

// row prints one value per segment, after name.
func row(out io.Writer, name string, segs []segment, f func(segment) string) {
	fmt.Fprintf(out, "  %s:", name)
	for _, sg := range segs {
		fmt.Fprintf(out, " %s", f(sg))
	}
	fmt.Fprintln(out)
}

// ms formats a latency in whole milliseconds, without the unit; a timeout
// as "timeout".
func ms(d time.Duration) string {
	return strings.TrimSuffix(fmtLat(d.Round(time.Millisecond), 0), "ms")
}

func check(err error) {
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
}
