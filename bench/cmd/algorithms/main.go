// Command algorithms compares the classic rate-limiting algorithms on one
// synthetic trace, replayed on a fake clock through each of them, and
// measures what each costs.
//
// Every algorithm is configured for the same nominal limit, L per window W
// (-limit, -window): fixedwindow, slidinglog and slidingwindow take (L, W);
// the token buckets (mutexbucket, gcra) take capacity L and rate L/W; the
// leaky bucket takes a queue of L and a leak of L/W.
//
// The trace has three phases of -phase each, and every request is one
// TryAcquire at its time:
//
//   - steady: Poisson arrivals at 0.8 L/W;
//   - bursts: Poisson background at 0.3 L/W, and every 2.5 W a burst of 3 L
//     requests spread over 10 ms;
//   - boundary: the adversary of the fixed window: 2 L requests in the last
//     millisecond before every other aligned window boundary and 2 L in the
//     first millisecond after it.
//
// The first table gives, per algorithm and phase, how many were admitted
// and the most admitted in any span of length W (every span that starts at
// an admission is checked), against L.
//
// The leaky bucket appears twice: with TryAcquire, a request is admitted
// only when the outlet is free (it polices), and with Acquire, callers wait
// in its queue of L for their slot (it shapes); the trace's requests are
// then admitted at their slot times.
//
// The second table is the sliding window counter's error on ordinary
// traffic: -clients clients with Poisson arrivals for 30 W each, every
// client through its own slidingwindow, each decision judged against the
// client's own admission history (see slidingError).
//
// The third table is the cost: heap bytes per limiter (measured: many
// limiters allocated, the heap growth divided by their number) at L = 100
// and L = 1000, the mutable decision state per key by construction, and
// ns/op and allocs/op of TryAcquire on the real clock, serial and with
// GOMAXPROCS 2 (RunParallel), on a limiter that admits every call: the
// median of three testing.Benchmark runs of -benchtime each. Each column
// is measured in a child process of the command started with GOMAXPROCS=1
// or 2 in its environment, as go test's -cpu 1,2 would set it: the command
// never sets GOMAXPROCS itself.
//
// It writes the tables to stdout and, with -save, to
// <save>/algorithms-<date>.txt with the provenance header, and draws
// <save>/plots/algorithms-boundary.svg: admitted in the trailing window W
// over a few seconds of the boundary phase, for fixedwindow, slidinglog,
// the token bucket and the leaky bucket (both ways).
//
// Run from the bench directory: go run ./cmd/algorithms [-save ../results].
package main

import (
	"context"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/fixedwindow"
	"github.com/admit-go/admit/gcra"
	"github.com/admit-go/admit/internal/provenance"
	"github.com/admit-go/admit/leakybucket"
	"github.com/admit-go/admit/mutexbucket"
	"github.com/admit-go/admit/slidinglog"
	"github.com/admit-go/admit/slidingwindow"
)

// algorithm is one row of every table.
type algorithm struct {
	name string
	// state is the mutable decision state a per-key table must keep for
	// one key, by construction.
	state string
	new   func(limit int64, window time.Duration, opts ...admit.Option) (admit.Limiter, error)
}

var algorithms = []algorithm{
	{"fixedwindow", "16 B: window index, count", func(l int64, w time.Duration, o ...admit.Option) (admit.Limiter, error) {
		return fixedwindow.New(l, w, o...)
	}},
	{"slidinglog", "8 B × limit: one timestamp per admission in the window", func(l int64, w time.Duration, o ...admit.Option) (admit.Limiter, error) {
		return slidinglog.New(l, w, o...)
	}},
	{"slidingwindow", "24 B: window index, two counts", func(l int64, w time.Duration, o ...admit.Option) (admit.Limiter, error) {
		return slidingwindow.New(l, w, o...)
	}},
	{"tokenbucket (mutexbucket)", "16 B: tokens, last", func(l int64, w time.Duration, o ...admit.Option) (admit.Limiter, error) {
		return mutexbucket.New(l, float64(l)/w.Seconds(), o...)
	}},
	{"gcra", "8 B: one stream value (TAT)", func(l int64, w time.Duration, o ...admit.Option) (admit.Limiter, error) {
		return gcra.New(l, float64(l)/w.Seconds(), o...)
	}},
	{"leakybucket", "8 B: one stream value (next free slot)", func(l int64, w time.Duration, o ...admit.Option) (admit.Limiter, error) {
		return leakybucket.New(l, float64(l)/w.Seconds(), o...)
	}},
}

func main() {
	limit := flag.Int64("limit", 100, "L: the limit per window")
	window := flag.Duration("window", time.Second, "W: the window")
	phase := flag.Duration("phase", 20*time.Second, "length of each trace phase")
	clients := flag.Int("clients", 2000, "clients in the sliding-window error table")
	benchtime := flag.Duration("benchtime", 300*time.Millisecond, "time per ns/op measurement")
	save := flag.String("save", "", "also write the tables to <save>/algorithms-<YYYY-MM-DD>.txt and the plot to <save>/plots/")
	busy := flag.String("note", "", "a note for the header (a busy machine, say)")
	format := flag.String("format", "svg", "svg, or png for a quick look")
	costMode := flag.String("cost-mode", "", "internal: measure TryAcquire's cost in this mode (serial or parallel) and print it; the cost table runs the command so, with GOMAXPROCS in the environment")
	flag.Parse()
	testing.Init()
	check(flag.Set("test.benchtime", benchtime.String()))
	if *costMode != "" {
		measureCost(*costMode)
		return
	}

	var out io.Writer = os.Stdout
	if *save != "" {
		check(os.MkdirAll(filepath.Join(*save, "plots"), 0o755))
		path := filepath.Join(*save, "algorithms-"+time.Now().Format("2006-01-02")+".txt")
		f, err := os.Create(path)
		check(err)
		defer func() {
			check(f.Close())
			fmt.Fprintln(os.Stderr, "algorithms: wrote", path)
		}()
		out = io.MultiWriter(os.Stdout, f)
	}
	provenance.Write(out, fmt.Sprintf("%s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH),
		"cd bench && go run ./cmd/algorithms "+strings.Join(os.Args[1:], " "))
	if *busy != "" {
		fmt.Fprintf(out, "note: %s\n", *busy)
	}

	L, W := *limit, int64(*window)
	tr := makeTrace(L, W, int64(*phase))
	fmt.Fprintf(out, "\n## Accuracy: one trace, L = %d per W = %v, every request a TryAcquire on a fake clock\n\n", L, *window)
	fmt.Fprintf(out, "max/W is the most admitted in any span of length W; the declared bound is what the algorithm promises.\n\n")
	series := accuracy(out, tr, L, W)

	fmt.Fprintf(out, "\n## slidingwindow against the exact slidinglog on ordinary traffic (%d clients, L = %d per W = %v)\n\n", *clients, L, *window)
	slidingError(out, *clients, L, W)

	fmt.Fprintf(out, "\n## Cost\n\n")
	cost(out, *benchtime)

	if *save != "" {
		if *format != "svg" && *format != "png" {
			check(fmt.Errorf("-format %q: want svg or png", *format))
		}
		file := filepath.Join(*save, "plots", "algorithms-boundary."+*format)
		check(drawBoundary(file, series, tr, L, W))
		fmt.Fprintln(os.Stderr, "algorithms: wrote", file)
	}
}

// replayClock is the trace's clock: the replay sets now to each request's
// time, and Sleep returns at once having moved now on by d, as a sleep on
// this clock would, and recorded it, so that a blocking call's admission
// time is its reading plus its wait. (A Sleep that left the time where it
// was would break admit.Clock's contract: a limiter that checks the time
// again after sleeping, as leakybucket's queue does, would sleep forever.
// buckettest's FakeClock would block the replaying goroutine; it also
// lives in a package that would bring the core module's test dependencies
// here.)
type replayClock struct{ now, slept int64 }

func (c *replayClock) Now() int64 { return c.now }

func (c *replayClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.now += int64(max(d, 0))
	c.slept += int64(max(d, 0))
	return nil
}

// request is one TryAcquire at elapsed time at (ns from the trace start).
type request struct{ at int64 }

type trace struct {
	reqs   []request
	phases []struct {
		name       string
		start, end int64
	}
}

func makeTrace(L, W, phase int64) trace {
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the same trace every run
	var tr trace
	poisson := func(from, to int64, perW float64) {
		mean := float64(W) / perW
		for t := from + int64(rng.ExpFloat64()*mean); t < to; t += int64(rng.ExpFloat64()*mean) + 1 {
			tr.reqs = append(tr.reqs, request{t})
		}
	}
	add := func(name string, start int64, f func(start, end int64)) {
		end := start + phase
		f(start, end)
		tr.phases = append(tr.phases, struct {
			name       string
			start, end int64
		}{name, start, end})
	}
	add("steady", 0, func(s, e int64) { poisson(s, e, 0.8*float64(L)) })
	add("bursts", phase, func(s, e int64) {
		poisson(s, e, 0.3*float64(L))
		for b := s + W/2; b+int64(10*time.Millisecond) < e; b += 5 * W / 2 {
			for i := range 3 * L {
				tr.reqs = append(tr.reqs, request{b + i*int64(10*time.Millisecond)/(3*L)})
			}
		}
	})
	add("boundary", 2*phase, func(s, e int64) {
		ms := int64(time.Millisecond)
		// Every other boundary, so that the window before each burst pair
		// is empty: the fixed window then admits L on each side.
		for k := (s+W-1)/W*W + W; k+ms < e; k += 2 * W {
			for i := range 2 * L {
				tr.reqs = append(tr.reqs, request{k - ms + i*ms/(2*L)}, request{k + i*ms/(2*L)})
			}
		}
	})
	slices.SortStableFunc(tr.reqs, func(a, b request) int { return cmpInt(a.at, b.at) })
	return tr
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// queued is the row of the leaky bucket whose callers wait in its queue
// (Acquire) instead of being rejected when the outlet is busy.
const queued = "leakybucket (callers queue)"

// declared is each algorithm's promise for a span of one window.
func declared(name string, L int64) string {
	switch name {
	case "fixedwindow", "slidingwindow":
		return fmt.Sprintf("2L = %d", 2*L)
	case "slidinglog":
		return fmt.Sprintf("L = %d", L)
	case "leakybucket", queued:
		return fmt.Sprintf("L+1 = %d", L+1)
	}
	return fmt.Sprintf("2L+1 = %d", 2*L+1) // capacity + rate × W + 1
}

// accuracy replays the trace through every algorithm and returns each
// one's admission times.
func accuracy(out io.Writer, tr trace, L, W int64) map[string][]int64 {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "algorithm\t")
	for _, p := range tr.phases {
		fmt.Fprintf(tw, "%s: requests\tadmitted\tmax/W\t", p.name)
	}
	fmt.Fprintln(tw, "whole trace max/W\tdeclared bound\t")
	series := map[string][]int64{}
	rows := append(slices.Clone(algorithms), algorithm{name: queued, new: algorithms[len(algorithms)-1].new})
	for _, a := range rows {
		clk := &replayClock{}
		l, err := a.new(L, time.Duration(W), admit.WithClock(clk))
		check(err)
		var at []int64
		for _, r := range tr.reqs {
			clk.now, clk.slept = r.at, 0
			if a.name == queued {
				// The caller waits for its slot, or is turned away at once
				// when the queue is full.
				if l.Acquire(context.Background()) == nil {
					at = append(at, r.at+clk.slept)
				}
			} else if l.TryAcquire() {
				at = append(at, r.at)
			}
		}
		slices.Sort(at)
		series[a.name] = at
		fmt.Fprintf(tw, "%s\t", a.name)
		for _, p := range tr.phases {
			req := 0
			for _, r := range tr.reqs {
				if r.at >= p.start && r.at < p.end {
					req++
				}
			}
			in := between(at, p.start, p.end)
			fmt.Fprintf(tw, "%d\t%d\t%d\t", req, len(in), maxInSpan(in, W))
		}
		fmt.Fprintf(tw, "%d\t%s\t\n", maxInSpan(at, W), declared(a.name, L))
	}
	check(tw.Flush())
	return series
}

func between(at []int64, from, to int64) []int64 {
	i, _ := slices.BinarySearch(at, from)
	j, _ := slices.BinarySearch(at, to)
	return at[i:j]
}

// maxInSpan is the most admissions in any half-open span [t, t+span); the
// busiest span can always start at an admission.
func maxInSpan(at []int64, span int64) int {
	best, j := 0, 0
	for i := range at {
		for j < len(at) && at[j] < at[i]+span {
			j++
		}
		best = max(best, j-i)
	}
	return best
}

// slidingError replays ordinary traffic, client by client, through a
// slidingwindow, and judges each decision against the client's own
// admission history: an admission is wrong if, with it, more than L of the
// client's admissions fall in the window (t − W, t]; a rejection is wrong if
// the window held fewer than L, so that an exact sliding log with the same
// history would have admitted it. Judging against its own history keeps one
// early error from counting again in every later decision. The last two
// columns compare the totals with an exact slidinglog fed the same
// requests: for a client above the limit, the two admit about as many,
// at different instants, so per-request disagreement says more about timing
// than about throughput.
func slidingError(out io.Writer, clients int, L, W int64) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "traffic\trequests\twrongly allowed\twrongly rejected\twrong share\tadmitted\tslidinglog admitted\t")
	rng := rand.New(rand.NewPCG(3, 4))
	for _, pop := range []struct {
		name   string
		lo, hi float64 // client rates, log-uniform, in multiples of L/W
	}{
		{"ordinary: clients at 0.01-0.5 L/W", 0.01, 0.5},
		{"every client below the limit (0.05-0.9 L/W)", 0.05, 0.9},
		{"around the limit (0.5-2 L/W)", 0.5, 2},
		{"above the limit (1.1-4 L/W)", 1.1, 4},
	} {
		var reqs, wrongAllow, wrongReject, swAdmitted, logAdmitted int
		for range clients {
			perW := float64(L) * math.Exp(math.Log(pop.lo)+rng.Float64()*(math.Log(pop.hi)-math.Log(pop.lo)))
			clk := &replayClock{}
			sw, err := slidingwindow.New(L, time.Duration(W), admit.WithClock(clk))
			check(err)
			sl, err := slidinglog.New(L, time.Duration(W), admit.WithClock(clk))
			check(err)
			var own []int64 // this client's admissions, oldest first
			head := 0
			mean := float64(W) / perW
			for t := int64(rng.ExpFloat64() * mean); t < 30*W; t += int64(rng.ExpFloat64()*mean) + 1 {
				clk.now = t
				for head < len(own) && own[head] <= t-W {
					head++
				}
				inWindow := int64(len(own) - head)
				reqs++
				if sl.TryAcquire() {
					logAdmitted++
				}
				if sw.TryAcquire() {
					swAdmitted++
					own = append(own, t)
					if inWindow+1 > L {
						wrongAllow++
					}
				} else if inWindow+1 <= L {
					wrongReject++
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.4f%%\t%d\t%d\t\n", pop.name, reqs, wrongAllow, wrongReject,
			100*float64(wrongAllow+wrongReject)/float64(reqs), swAdmitted, logAdmitted)
	}
	check(tw.Flush())
}

// heapPerLimiter measures the heap bytes one limiter holds: the growth of
// the live heap over n of them, divided by n.
func heapPerLimiter(a algorithm, limit int64) float64 {
	const n = 2000
	keep := make([]admit.Limiter, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		l, err := a.new(limit, time.Second)
		check(err)
		keep[i] = l
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	// In int64: a heap that shrank (a collection of garbage from before)
	// gives a negative growth, not a wrapped uint64 of about 1.8e19.
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
}

func cost(out io.Writer, benchtime time.Duration) {
	serial := costIn(1, "serial", benchtime)
	parallel := costIn(2, "parallel", benchtime)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "algorithm\theap B/limiter L=100\theap B/limiter L=1000\tstate per key\tns/op serial\tns/op -cpu 2\tallocs/op\t")
	for i, a := range algorithms {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%.1f\t%.1f\t%d\t\n", a.name,
			heapPerLimiter(a, 100), heapPerLimiter(a, 1000), a.state, serial[i].ns, parallel[i].ns, max(serial[i].allocs, parallel[i].allocs))
	}
	check(tw.Flush())
}

// costResult is one algorithm's TryAcquire cost in one mode.
type costResult struct {
	ns     float64
	allocs int64
}

// costIn measures every algorithm's TryAcquire in mode (serial or
// parallel) in a child process of this command started with GOMAXPROCS=procs
// in its environment: GOMAXPROCS is set only through the environment (or
// go test's -cpu), never in code. The child (-cost-mode) prints its
// GOMAXPROCS, then one line per algorithm, in order.
func costIn(procs int, mode string, benchtime time.Duration) []costResult {
	exe, err := os.Executable()
	check(err)
	cmd := exec.Command(exe, "-cost-mode", mode, "-benchtime", benchtime.String())
	cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", procs))
	cmd.Stderr = os.Stderr
	outb, err := cmd.Output()
	check(err)
	lines := strings.Split(strings.TrimSpace(string(outb)), "\n")
	var got int
	if _, err := fmt.Sscanf(lines[0], "gomaxprocs %d", &got); err != nil || got != procs {
		check(fmt.Errorf("cost child for %s: first line %q, want gomaxprocs %d", mode, lines[0], procs))
	}
	if len(lines) != 1+len(algorithms) {
		check(fmt.Errorf("cost child for %s: %d lines, want %d", mode, len(lines), 1+len(algorithms)))
	}
	res := make([]costResult, len(algorithms))
	for i, a := range algorithms {
		name, rest, _ := strings.Cut(lines[1+i], "\t")
		if name != a.name {
			check(fmt.Errorf("cost child for %s: line %q, want %s", mode, lines[1+i], a.name))
		}
		if _, err := fmt.Sscanf(rest, "%g %d", &res[i].ns, &res[i].allocs); err != nil {
			check(fmt.Errorf("cost child for %s: line %q: %v", mode, lines[1+i], err))
		}
	}
	return res
}

// measureCost is the child of costIn: the median of three testing.Benchmark
// runs of each algorithm's TryAcquire in mode, under the GOMAXPROCS its
// environment gave it, on a limiter that admits every call.
func measureCost(mode string) {
	if mode != "serial" && mode != "parallel" {
		check(fmt.Errorf("-cost-mode %q: want serial or parallel", mode))
	}
	fmt.Printf("gomaxprocs %d\n", runtime.GOMAXPROCS(0))
	for _, a := range algorithms {
		// A limiter that admits every call: 10^6 per millisecond is 10^9
		// per second, faster than any caller here.
		mk := func() admit.Limiter {
			l, err := a.new(1e6, time.Millisecond)
			check(err)
			return l
		}
		f := func(b *testing.B) {
			l := mk()
			b.ReportAllocs()
			for b.Loop() {
				l.TryAcquire()
			}
		}
		if mode == "parallel" {
			f = func(b *testing.B) {
				l := mk()
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						l.TryAcquire()
					}
				})
			}
		}
		// The median of three runs, on a machine that may be busy.
		var runs []float64
		var allocs int64
		for range 3 {
			runtime.GC() // no earlier limiter's garbage collected on this run's time
			r := testing.Benchmark(f)
			runs = append(runs, float64(r.T.Nanoseconds())/float64(r.N))
			allocs = max(allocs, r.AllocsPerOp())
		}
		slices.Sort(runs)
		fmt.Printf("%s\t%g %d\n", a.name, runs[1], allocs)
	}
}

// drawBoundary plots, over the first seconds of the boundary phase, how
// many each algorithm admitted in the trailing window W.
func drawBoundary(file string, series map[string][]int64, tr trace, L, W int64) error {
	ph := tr.phases[2]
	from, to := ph.start+W/2, ph.start+W/2+6*W
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Boundary pattern: 2L requests in the ms before and 2L in the ms after every other window boundary\nadmitted in the trailing window W, L = %d per W = %v (fake clock; token bucket: capacity L, rate L/W)", L, time.Duration(W))
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "admitted in the last W"
	p.Add(plotter.NewGrid())
	styles := []struct {
		name   string
		color  color.Color
		width  float64
		dashes []vg.Length
	}{
		{"fixedwindow", color.RGBA{0xd6, 0x27, 0x28, 0xff}, 2, nil},
		{"tokenbucket (mutexbucket)", color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, 4, nil},
		{"slidinglog", color.RGBA{0x1f, 0x77, 0xb4, 0xff}, 1.5, []vg.Length{vg.Points(6), vg.Points(3)}},
		{"leakybucket", color.RGBA{0x94, 0x67, 0xbd, 0xff}, 2, nil},
		{queued, color.RGBA{0xff, 0x7f, 0x0e, 0xff}, 1.5, []vg.Length{vg.Points(2), vg.Points(2)}},
	}
	step := W / 500
	for _, st := range styles {
		at := series[st.name]
		var xys plotter.XYs
		for t := from; t <= to; t += step {
			n := len(between(at, t-W+1, t+1))
			xys = append(xys, plotter.XY{X: float64(t-ph.start) / 1e9, Y: float64(n)})
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		line.Color = st.color
		line.Width = vg.Points(st.width)
		line.Dashes = st.dashes
		p.Add(line)
		p.Legend.Add(st.name, line)
	}
	lim, err := plotter.NewLine(plotter.XYs{{X: float64(from-ph.start) / 1e9, Y: float64(L)}, {X: float64(to-ph.start) / 1e9, Y: float64(L)}})
	if err != nil {
		return err
	}
	lim.Color = color.Gray{Y: 0x60}
	lim.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	p.Add(lim)
	p.Legend.Add("L", lim)
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, float64(2*L)*1.6 // room for the legend
	return p.Save(8*vg.Inch, 4.5*vg.Inch, file)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "algorithms:", err)
		os.Exit(1)
	}
}
