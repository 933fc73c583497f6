// Command targets reads a raw result file written by make bench-full and
// prints the ratios of medians that the project's performance targets are
// stated in: each implementation against the time.Since floor measured in the
// same run, and this module's buckets against x/time/rate.
//
//	go run ./cmd/targets                 # newest ../results/*.txt
//	go run ./cmd/targets FILE
//
// It prints numbers only; whether a ratio meets a target is for the reader
// (and the README) to say.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"golang.org/x/perf/benchfmt"

	"github.com/admit-go/admit/internal/provenance"
)

type key struct {
	name  string // full benchmark name without the -N suffix
	procs int
}

func main() {
	results := flag.String("results", "../results", "directory searched for the newest raw result")
	flag.Parse()
	path := flag.Arg(0)
	if path == "" {
		var err error
		if path, err = provenance.Newest(*results, provenance.FullResult); err != nil {
			fmt.Fprintln(os.Stderr, "targets:", err)
			os.Exit(1)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "targets:", err)
		os.Exit(1)
	}
	defer f.Close()

	ns := map[key][]float64{}
	allocs := map[key][]float64{}
	cpuNs := map[key][]float64{}
	r := benchfmt.NewReader(f, path)
	for r.Scan() {
		res, ok := r.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		// Parts splits off the -N GOMAXPROCS suffix as a last part.
		base, parts := res.Name.Parts()
		procs := 1
		if n := len(parts); n > 0 && parts[n-1][0] == '-' {
			fmt.Sscanf(string(parts[n-1]), "-%d", &procs)
			parts = parts[:n-1]
		}
		name := "Benchmark" + string(base)
		for _, p := range parts {
			name += string(p)
		}
		k := key{name, procs}
		if v, ok := res.Value("sec/op"); ok {
			ns[k] = append(ns[k], v*1e9)
		}
		if v, ok := res.Value("allocs/op"); ok {
			allocs[k] = append(allocs[k], v)
		}
		if v, ok := res.Value("cpu-sec/op"); ok { // benchfmt reads cpu-ns/op as cpu-sec/op
			cpuNs[k] = append(cpuNs[k], v*1e9)
		} else if v, ok := res.Value("cpu-ns/op"); ok {
			cpuNs[k] = append(cpuNs[k], v)
		}
	}
	if err := r.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "targets:", err)
		os.Exit(1)
	}

	med := func(k key) (float64, bool) { return median(ns[k]) }

	fmt.Printf("source: %s\n", path)
	fmt.Println("ratios of medians (ns/op); floor = impl=floor-since in the same case, mode and GOMAXPROCS")
	fmt.Printf("\n%-34s %5s %-14s %9s %9s %9s %8s\n", "case/mode", "procs", "impl", "ns/op", "÷floor", "xrate÷", "allocs")
	var rows []key
	for k := range ns {
		if strings.HasPrefix(k.name, "BenchmarkTryAcquire/") || strings.HasPrefix(k.name, "BenchmarkAcquire/") {
			rows = append(rows, k)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].name != rows[j].name {
			return rows[i].name < rows[j].name
		}
		return rows[i].procs < rows[j].procs
	})
	for _, k := range rows {
		i := strings.LastIndex(k.name, "/impl=")
		if i < 0 {
			continue
		}
		prefix, impl := k.name[:i], k.name[i+len("/impl="):]
		if impl != "mutexbucket" && impl != "casbucket" && impl != "shardedbucket" {
			continue
		}
		m, _ := med(k)
		floor, fok := med(key{prefix + "/impl=floor-since", k.procs})
		xr, xok := med(key{prefix + "/impl=xrate", k.procs})
		cell := func(ok bool, v float64) string {
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.2f", v)
		}
		a := "-"
		if v := allocs[k]; len(v) > 0 {
			a = fmt.Sprintf("%.0f", slices.Max(v))
		}
		fmt.Printf("%-34s %5d %-14s %9.2f %9s %9s %8s\n",
			strings.TrimPrefix(prefix, "Benchmark"), k.procs, impl, m,
			cell(fok, m/floor), cell(xok, xr/m), a)
	}
	fmt.Println("\nxrate÷ is x/time/rate's median divided by the bucket's: how many times faster the bucket is.")
	fmt.Println("allocs is the largest allocs/op seen over the samples.")

	// BenchmarkMiddleware (results/middleware-*.txt): admithttp against
	// httprate and tollbooth, raw and as own cost (ns/op minus impl=none).
	var mw []key
	for k := range ns {
		if strings.HasPrefix(k.name, "BenchmarkMiddleware/") && strings.HasSuffix(k.name, "/impl=admithttp") {
			mw = append(mw, k)
		}
	}
	if len(mw) == 0 {
		return
	}
	sort.Slice(mw, func(i, j int) bool {
		if mw[i].name != mw[j].name {
			return mw[i].name < mw[j].name
		}
		return mw[i].procs < mw[j].procs
	})
	for _, metric := range []struct {
		unit string
		m    map[key][]float64
	}{{"ns/op", ns}, {"cpu-ns/op", cpuNs}} {
		if len(metric.m) == 0 {
			continue
		}
		fmt.Printf("\n%-34s %5s %9s %9s %9s %9s %9s %9s   (%s)\n", "middleware case/mode", "procs", "none", "admithttp", "httprate÷", "own÷", "tollb÷", "own÷", metric.unit)
		for _, k := range mw {
			prefix := strings.TrimSuffix(k.name, "/impl=admithttp")
			a, _ := median(metric.m[k])
			none, nok := median(metric.m[key{prefix + "/impl=none", k.procs}])
			cells := []string{}
			for _, peer := range []string{"httprate", "tollbooth"} {
				p, ok := median(metric.m[key{prefix + "/impl=" + peer, k.procs}])
				if !ok || a == 0 {
					cells = append(cells, "-", "-")
					continue
				}
				own := "-"
				if nok && a > none {
					own = fmt.Sprintf("%.2f", (p-none)/(a-none))
				}
				cells = append(cells, fmt.Sprintf("%.2f", p/a), own)
			}
			fmt.Printf("%-34s %5d %9.1f %9.1f %9s %9s %9s %9s\n", strings.TrimPrefix(prefix, "BenchmarkMiddleware/"), k.procs, none, a,
				cells[0], cells[1], cells[2], cells[3])
		}
	}
	fmt.Println("\nhttprate÷ and tollb÷ are the peer's median over admithttp's; own÷ the same after subtracting impl=none.")
}

// median returns the median of v, and false if v is empty.
func median(v []float64) (float64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	v = slices.Clone(v)
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}
