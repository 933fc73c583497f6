// Command storm measures accuracy and fairness, the same way for every
// implementation, on the real clock.
//
// The first table is the storm: for each implementation, goroutine count and
// (rate, capacity) mix, a fresh full limiter is hammered with TryAcquire from
// every goroutine for -duration. A token bucket that starts full may admit at
// most
//
//	bound = capacity + rate × elapsed
//
// over any span; elapsed is measured from before the limiter is built to
// after the last goroutine has stopped, so the bound is generous to the
// limiter. excess = admitted − ⌊bound⌋: positive means it admitted more than
// any correct bucket could (docs/design.md allows +1 for rounding). Each
// configuration runs -trials times; the row shows the trial with the largest
// excess, and over counts the trials with excess above 1.
//
// go.uber.org/ratelimit is not in the storm: its Take never rejects, it
// blocks until the caller's slot, so a storm of Take would measure how long
// callers queue rather than how many are admitted.
//
// The second table is the same storm for the per-key limiters
// (bench.KeyedImpls): the goroutines are spread over -keys keys, and each
// key's admissions are held to the bound (see keyedTable).
//
// The third table is fairness under blocking: -waiters goroutines call
// Acquire together on a limiter of capacity 1 that was just drained at time
// t0. The k-th admission can come no earlier than t0 + k/rate (the ideal
// schedule); each admission time is read after Acquire returns, so it can
// only be late, never spuriously early. The table gives the spread of the
// sorted admission times against that schedule: the last admission, the
// ideal last (waiters/rate), the rate achieved (waiters/last), the largest
// and the mean absolute deviation, the smallest deviation (negative is
// early) and how many came more than 1µs early. uber is included here: Take
// is a blocking limiter, and its first Take plays the drain. juju's Wait and
// uber's Take take no context.
//
// The defaults finish in well under a minute. Run from the bench directory:
//
//	go run ./cmd/storm [-duration 250ms] [-trials 3] [-impls rate,xrate] [-save ../results]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/admit-go/admit/bench"

	"github.com/admit-go/admit/internal/provenance"
)

// impls are the implementations the tables run, bench.Impls unless -impls
// narrows them.
var impls = bench.Impls

type mix struct {
	rate     float64
	capacity int64
}

func main() {
	duration := flag.Duration("duration", 250*time.Millisecond, "length of each storm trial")
	trials := flag.Int("trials", 3, "trials per storm configuration; the worst is shown")
	goroutines := flag.String("goroutines", "2,8,64", "comma-separated goroutine counts for the storm")
	mixes := flag.String("mixes", "1e5:10,1e3:1,1e6:1000", "comma-separated rate:capacity pairs for the storm")
	keys := flag.Int("keys", 4, "keys in the keyed storm; the goroutines are spread over them")
	waiters := flag.Int("waiters", 50, "goroutines blocked in Acquire in the fairness table")
	waitRates := flag.String("waitrates", "200,2000", "comma-separated rates for the fairness table")
	save := flag.String("save", "", "also write the output to <save>/storm-<YYYY-MM-DD>.txt")
	only := flag.String("impls", "", "comma-separated implementations to run (default: all); with -save the file is storm-<YYYY-MM-DD>-<impls>.txt")
	flag.Parse()

	gs, err := parseInts(*goroutines)
	check(err)
	ms, err := parseMixes(*mixes)
	check(err)
	wrs, err := parseFloats(*waitRates)
	check(err)

	var out io.Writer = os.Stdout
	if *save != "" {
		check(os.MkdirAll(*save, 0o755))
		name := "storm-" + time.Now().Format("2006-01-02")
		if *only != "" {
			name += "-" + strings.ReplaceAll(*only, ",", "-")
		}
		path := filepath.Join(*save, name+".txt")
		f, err := os.Create(path)
		check(err)
		defer func() {
			check(f.Close())
			fmt.Fprintln(os.Stderr, "storm: wrote", path)
		}()
		out = io.MultiWriter(os.Stdout, f)
	}

	if *only != "" {
		impls = nil
		for _, name := range strings.Split(*only, ",") {
			im, ok := bench.Lookup(name)
			if !ok {
				check(fmt.Errorf("storm: unknown implementation %q", name))
			}
			impls = append(impls, im)
		}
	}

	header(out)
	fmt.Fprintf(out, "\n## Storm: TryAcquire from many goroutines on a full limiter, %v per trial, worst of %d\n\n", *duration, *trials)
	stormTable(out, gs, ms, *duration, *trials)
	fmt.Fprintf(out, "\n## Keyed storm: Allow from many goroutines over %d keys on a full per-key limiter, %v per trial, worst of %d\n\n", *keys, *duration, *trials)
	keyedTable(out, gs, *keys, ms, *duration, *trials)
	fmt.Fprintf(out, "\n## Waiters: %d goroutines in Acquire on a drained limiter of capacity 1\n\n", *waiters)
	waitTable(out, *waiters, wrs)
}

// stormResult is one trial.
type stormResult struct {
	admitted int64
	elapsed  time.Duration
	bound    int64 // ⌊capacity + rate × elapsed⌋
}

func (r stormResult) excess() int64 { return r.admitted - r.bound }

func stormTable(out io.Writer, gs []int, ms []mix, d time.Duration, trials int) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "impl\tgoroutines\tcapacity\trate/s\telapsed\tadmitted\tbound\texcess\tover\t")
	for _, im := range impls {
		if !im.Try {
			continue
		}
		for _, m := range ms {
			for _, g := range gs {
				var worst stormResult
				over := 0
				for t := range trials {
					r := storm(im, g, m, d)
					if t == 0 || r.excess() > worst.excess() {
						worst = r
					}
					if r.excess() > 1 {
						over++
					}
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%v\t%d\t%d\t%+d\t%d/%d\t\n",
					im.Name, g, m.capacity, fmtRate(m.rate), worst.elapsed.Round(time.Millisecond),
					worst.admitted, worst.bound, worst.excess(), over, trials)
			}
		}
	}
	tw.Flush()
}

// storm runs one trial: g goroutines call TryAcquire in a tight loop on a
// fresh limiter for d.
func storm(im bench.Impl, g int, m mix, d time.Duration) stormResult {
	var (
		l        bench.Limiter
		start    = make(chan struct{})
		stop     atomic.Bool
		admitted atomic.Int64
		wg       sync.WaitGroup
	)
	for range g {
		wg.Go(func() {
			<-start
			var n int64
			for !stop.Load() {
				if l.TryAcquire() {
					n++
				}
			}
			admitted.Add(n)
		})
	}
	// The goroutines exist before t0 so that their start-up is not
	// counted; t0 is taken before the limiter is built, which only widens
	// the bound.
	t0 := time.Now()
	l, err := im.New(m.capacity, m.rate)
	check(err)
	close(start)
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(t0)
	bound := float64(m.capacity) + m.rate*elapsed.Seconds()
	return stormResult{admitted: admitted.Load(), elapsed: elapsed, bound: int64(math.Floor(bound))}
}

// earlyTolerance absorbs rounding in implementations that schedule in
// floating point: an admission counts as early only if it precedes the
// schedule by more than this.
const earlyTolerance = time.Microsecond

func waitTable(out io.Writer, waiters int, rates []float64) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "impl\twaiters\trate/s\tok\tlast\tideal last\tachieved/s\tmax late\tmean |dev|\tmin dev\tearly>1µs\t")
	for _, rate := range rates {
		for _, im := range impls {
			r := waiterRun(im, waiters, rate)
			achieved := "-"
			if r.last > 0 {
				achieved = strconv.FormatFloat(float64(r.ok)/r.last.Seconds(), 'f', 0, 64)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%v\t%v\t%s\t%v\t%v\t%v\t%d\t\n",
				im.Name, waiters, fmtRate(rate), r.ok, r.last, r.idealLast, achieved,
				r.maxLate, r.meanAbs, r.minDev, r.early)
		}
	}
	tw.Flush()
}

type waiterResult struct {
	ok               int
	last, idealLast  time.Duration
	maxLate, meanAbs time.Duration
	minDev           time.Duration
	early            int
}

// waiterRun drains a capacity-1 limiter at t0 and lets n goroutines Acquire
// at once. The k-th admission (k = 1..n, in time order) is due no earlier
// than t0 + k/rate.
func waiterRun(im bench.Impl, n int, rate float64) waiterResult {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var (
		l     bench.Limiter
		start = make(chan struct{})
		wg    sync.WaitGroup
		mu    sync.Mutex
		at    []time.Duration
		ok    int
		t0    time.Time
	)
	for range n {
		wg.Go(func() {
			<-start
			err := l.Acquire(ctx)
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok++
				at = append(at, d)
			}
		})
	}
	// Build and drain right at t0. Building here matters for juju, whose
	// refill ticks are counted from construction: a bucket built long
	// before the drain would be part-way to its next tick and hand that
	// token out early.
	t0 = time.Now()
	l, err := im.New(1, rate)
	check(err)
	// The drain: the bucket holds exactly one token (it starts full and
	// cannot hold more), so after this call it holds none. For uber the
	// first Take plays the same part: the next slot is one interval later.
	if im.Try {
		if !l.TryAcquire() {
			check(fmt.Errorf("%s: full bucket rejected", im.Name))
		}
	} else {
		check(l.Acquire(ctx))
	}
	close(start)
	wg.Wait()

	slices.Sort(at)
	r := waiterResult{ok: ok, idealLast: schedule(n, rate)}
	if len(at) == 0 {
		return r
	}
	r.last = at[len(at)-1].Round(time.Microsecond)
	var sumAbs time.Duration
	r.minDev = time.Duration(math.MaxInt64)
	for i, a := range at {
		dev := a - schedule(i+1, rate)
		r.maxLate = max(r.maxLate, dev)
		r.minDev = min(r.minDev, dev)
		sumAbs += max(dev, -dev)
		if dev < -earlyTolerance {
			r.early++
		}
	}
	r.meanAbs = (sumAbs / time.Duration(len(at))).Round(time.Microsecond)
	r.maxLate = r.maxLate.Round(time.Microsecond)
	r.minDev = r.minDev.Round(time.Microsecond)
	return r
}

// schedule is the earliest time after the drain at which the k-th further
// token exists.
func schedule(k int, rate float64) time.Duration {
	return time.Duration(float64(k) / rate * float64(time.Second))
}

func header(w io.Writer) {
	provenance.Write(w, fmt.Sprintf("%s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH),
		"cd bench && go run ./cmd/storm "+strings.Join(os.Args[1:], " "))
	fmt.Fprintf(w, "gomaxprocs: %d\n", runtime.GOMAXPROCS(0))
}

// fmtRate prints 100000 as 1e5 and 200 as 200.
func fmtRate(r float64) string {
	if r >= 1e4 && r == math.Trunc(r) {
		return strconv.FormatFloat(r, 'e', -1, 64)
	}
	return strconv.FormatFloat(r, 'g', -1, 64)
}

func parseInts(s string) ([]int, error) {
	var v []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		v = append(v, n)
	}
	return v, nil
}

func parseFloats(s string) ([]float64, error) {
	var v []float64
	for f := range strings.SplitSeq(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(x > 0) {
			return nil, fmt.Errorf("bad rate %q", f)
		}
		v = append(v, x)
	}
	return v, nil
}

func parseMixes(s string) ([]mix, error) {
	var v []mix
	for f := range strings.SplitSeq(s, ",") {
		rs, cs, ok := strings.Cut(strings.TrimSpace(f), ":")
		r, err1 := strconv.ParseFloat(rs, 64)
		c, err2 := strconv.ParseFloat(cs, 64)
		if !ok || err1 != nil || err2 != nil || !(r > 0) || c < 1 || c != math.Trunc(c) {
			return nil, fmt.Errorf("bad mix %q: want rate:capacity", f)
		}
		v = append(v, mix{rate: r, capacity: int64(c)})
	}
	return v, nil
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
}
