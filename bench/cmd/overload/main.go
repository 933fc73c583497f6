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
// 10, queueing 2 to 3); and admit's adaptive with its defaults (through
// admithttp.Concurrency). Each sheds with 503.
//
// Two experiments: offered load 1×, 2×, 3× and 5× the capacity, for
// goodput (200s within the deadline ÷ capacity) and the p50 and p99 of the
// admitted requests; and a capacity step at 2× the full capacity (c → c/2
// after a third of the run, back to c after two thirds), for the limit and
// the admitted latency over time. Writes the tables (with the machine's
// description) to -save/overload-<date>-<host>-<commit>.txt and the plots
// to -save/plots/overload-*.svg. Run from the bench directory:
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

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/admit-go/admit/adaptive"
	"github.com/admit-go/admit/admithttp"
	"github.com/admit-go/admit/chanpool"
	"github.com/admit-go/admit/internal/provenance"
)

var (
	workers  = flag.Int("workers", 8, "the backend's workers (c)")
	service  = flag.Duration("service", 20*time.Millisecond, "each call's service time")
	deadline = flag.Duration("deadline", 200*time.Millisecond, "the client's timeout")
	duration = flag.Duration("duration", 10*time.Second, "length of each load run")
	stepDur  = flag.Duration("step", 30*time.Second, "length of the capacity-step run")
	loadsArg = flag.String("loads", "1,2,3,5", "offered loads, multiples of the capacity")
	save     = flag.String("save", "", "write the result and plots under this directory")
	seed     = flag.Uint64("seed", 1, "the arrivals' seed")
)

// backend is c workers serving FIFO: a call waits for a worker (Go's
// channel send queue is first in, first out), holds it for the service
// time, and is not cancelled when its caller goes away.
type backend struct {
	sem     chan struct{}
	workers atomic.Int64 // how many of sem's slots are usable now
	removed chan struct{}
}

func newBackend(c int) *backend {
	b := &backend{sem: make(chan struct{}, c), removed: make(chan struct{}, c)}
	b.workers.Store(int64(c))
	return b
}

// setWorkers changes the usable workers: lowering takes slots away (as they
// free), raising gives them back.
func (b *backend) setWorkers(n int) {
	cur := int(b.workers.Swap(int64(n)))
	for ; cur > n; cur-- {
		go func() { b.sem <- struct{}{}; b.removed <- struct{}{} }()
	}
	for ; cur < n; cur++ {
		<-b.removed
		<-b.sem
	}
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.sem <- struct{}{}
	time.Sleep(*service)
	<-b.sem
	w.WriteHeader(http.StatusOK)
}

// impl is one limiter in front of the backend; limit reports its current
// limit (0 when it has none).
type impl struct {
	name string
	mw   func() (func(http.Handler) http.Handler, func() int)
}

var impls = []impl{
	{"none", func() (func(http.Handler) http.Handler, func() int) {
		return func(h http.Handler) http.Handler { return h }, func() int { return 0 }
	}},
	{"fixed-c", func() (func(http.Handler) http.Handler, func() int) { return fixed(*workers) }},
	{"fixed-2c", func() (func(http.Handler) http.Handler, func() int) { return fixed(2 * *workers) }},
	{"failsafe-default", func() (func(http.Handler) http.Handler, func() int) {
		return failsafe(adaptivelimiter.NewWithDefaults[any]())
	}},
	{"failsafe-tuned", func() (func(http.Handler) http.Handler, func() int) {
		return failsafe(adaptivelimiter.NewBuilder[any]().
			WithLimits(1, 100, 20).
			WithRecentWindow(time.Second, 30*time.Second, 50).
			WithBaselineWindow(10).
			WithQueueing(2, 3).
			Build())
	}},
	{"admit-adaptive", func() (func(http.Handler) http.Handler, func() int) {
		l, err := adaptive.New()
		check(err)
		return admithttp.Concurrency(l), l.Limit
	}},
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

// failsafe is failsafe-go's limiter used as its standalone usage shows:
// a permit, then Record, or Drop when the call failed (a 5xx, or a request
// context that ended: its client gave up).
func failsafe(l adaptivelimiter.AdaptiveLimiter[any]) (func(http.Handler) http.Handler, func() int) {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := l.AcquirePermit(r.Context())
			if err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			sw := &statusWriter{ResponseWriter: w}
			next.ServeHTTP(sw, r)
			if sw.status >= 500 || r.Context().Err() != nil {
				p.Drop()
			} else {
				p.Record()
			}
		})
	}, l.Limit
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(c int) { w.status = c; w.ResponseWriter.WriteHeader(c) }

// poissonPacer is a vegeta pacer of exponential gaps at rate per second,
// from a seeded generator: the same arrivals for every implementation.
type poissonPacer struct {
	rate float64
	mu   sync.Mutex
	rng  *rand.Rand
	at   []time.Duration // arrival times drawn so far
}

func poisson(rate float64, seed uint64) *poissonPacer {
	return &poissonPacer{rate: rate, rng: rand.New(rand.NewPCG(seed, 7))}
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
	return max(0, p.at[hits]-elapsed), false
}

func (p *poissonPacer) Rate(time.Duration) float64 { return p.rate }

type run struct {
	goodput        float64
	p50, p99       time.Duration
	admitted, shed int
	offered        int
	series         []sample
}

// sample is one tick of a run: the limiter's limit and the p99 of the
// requests admitted in the tick.
type sample struct {
	t     time.Duration
	limit int
	p99   time.Duration
}

func attack(im impl, factor float64, dur time.Duration, steps bool) run {
	b := newBackend(*workers)
	mw, limit := im.mw()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	srv := &http.Server{Handler: mw(b)}
	go srv.Serve(ln)
	defer srv.Close()

	capacity := float64(*workers) / service.Seconds()
	targeter := vegeta.NewStaticTargeter(vegeta.Target{Method: "GET", URL: "http://" + ln.Addr().String() + "/"})
	atk := vegeta.NewAttacker(vegeta.Timeout(*deadline), vegeta.KeepAlive(true), vegeta.MaxWorkers(4096), vegeta.Workers(64))
	start := time.Now()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	var series []sample
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		phase := 0
		for range tick.C {
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
	capWork := 0.0 // completions the backend could make, worker-seconds / service
	for res := range atk.Attack(targeter, poisson(factor*capacity, *seed), dur, im.name) {
		r.offered++
		switch {
		case res.Code == http.StatusOK:
			r.admitted++
			lat = append(lat, res.Latency)
			tk := int((res.Timestamp.Sub(start)) / (100 * time.Millisecond))
			perTick[tk] = append(perTick[tk], res.Latency)
			if res.Latency <= *deadline {
				r.goodput++
			}
		case res.Code == http.StatusServiceUnavailable:
			r.shed++
		}
	}
	stop.Store(true)
	wg.Wait()
	capWork = capacity * dur.Seconds()
	if steps {
		capWork = capacity * dur.Seconds() * (1.0/3 + 0.5/3 + 1.0/3)
	}
	r.goodput /= capWork
	r.p50, r.p99 = pct(lat, 0.5), pct(lat, 0.99)
	for i := range series {
		s := &series[i]
		s.p99 = pct(perTick[int(s.t/(100*time.Millisecond))-1], 0.99)
	}
	r.series = series
	return r
}

func pct(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func main() {
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
	fmt.Fprintf(out, "clocksource: %s\n", readTrim("/sys/devices/system/clocksource/clocksource0/current_clocksource"))
	fmt.Fprintf(out, "caches: %s\n", caches())
	fmt.Fprintf(out, "gomaxprocs: %d (server, backend and load generator in one process)\n", runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "backend: %d workers x %v (capacity %.0f/s), client deadline %v, Poisson arrivals seed %d\n\n",
		*workers, *service, float64(*workers)/service.Seconds(), *deadline, *seed)

	results := map[string][]run{}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "load\timpl\toffered\tadmitted\tshed\tgoodput\tp50\tp99\tp50/S\tp99/S\t\n")
	for _, f := range loads {
		for _, im := range impls {
			r := attack(im, f, *duration, false)
			results[im.name] = append(results[im.name], r)
			fmt.Fprintf(tw, "%gx\t%s\t%d\t%d\t%d\t%.3f\t%v\t%v\t%.2f\t%.2f\t\n", f, im.name, r.offered, r.admitted, r.shed, r.goodput,
				r.p50.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond),
				float64(r.p50)/float64(*service), float64(r.p99)/float64(*service))
			tw.Flush()
		}
	}
	fmt.Fprintf(out, "\ncapacity step at 2x: %d workers, %d from %v, %d from %v; limit and admitted p99 per second\n",
		*workers, *workers/2, *stepDur/3, *workers, 2**stepDur/3)
	steps := map[string]run{}
	for _, im := range impls {
		r := attack(im, 2, *stepDur, true)
		steps[im.name] = r
		fmt.Fprintf(out, "%s: goodput %.3f p50 %v p99 %v\n  limit:", im.name, r.goodput, r.p50.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond))
		for i := 9; i < len(r.series); i += 10 {
			fmt.Fprintf(out, " %d", r.series[i].limit)
		}
		fmt.Fprintf(out, "\n  p99/ms:")
		for i := 9; i < len(r.series); i += 10 {
			fmt.Fprintf(out, " %.0f", float64(maxP99(r.series[i-9:i+1]))/1e6)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "\nloadavg-at-end: %s\n", provenance.LoadAvg())
	if *save != "" {
		host, _ := os.Hostname()
		path := filepath.Join(*save, fmt.Sprintf("overload-%s-%s-%s.txt", time.Now().Format("2006-01-02"), host, commit))
		check(os.WriteFile(path, buf.Bytes(), 0o644))
		fmt.Fprintln(os.Stderr, "overload: wrote", path)
		check(plots(filepath.Join(*save, "plots"), loads, results, steps))
	}
}

func maxP99(s []sample) time.Duration {
	var m time.Duration
	for _, x := range s {
		m = max(m, x.p99)
	}
	return m
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// caches describes cpu0's caches and which CPUs share each.
func caches() string {
	var parts []string
	for i := 0; ; i++ {
		d := fmt.Sprintf("/sys/devices/system/cpu/cpu0/cache/index%d/", i)
		if _, err := os.Stat(d); err != nil {
			break
		}
		parts = append(parts, fmt.Sprintf("L%s %s %s shared by cpus %s", readTrim(d+"level"), readTrim(d+"type"),
			readTrim(d+"size"), readTrim(d+"shared_cpu_list")))
	}
	if len(parts) == 0 {
		return "unknown"
	}
	return strings.Join(parts, "; ")
}

func check(err error) {
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
}

var _ = math.Inf
