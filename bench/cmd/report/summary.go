package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/perf/benchfmt"
)

// baseline is the implementation the summary's ratios compare against.
const baseline = "xrate"

// sample is one benchmark row's identity in the summary: its case, mode and
// GOMAXPROCS.
type row struct {
	bench, cas, mode string
	procs            int
}

func (r row) label() string {
	name := r.cas + " " + r.mode
	if r.bench != "TryAcquire" {
		name = r.bench + " " + name
	}
	return fmt.Sprintf("%s -cpu %d", name, r.procs)
}

// summarise reads raw go test -bench output and writes the table a person
// reads at a glance: one row per case, mode and GOMAXPROCS; one column per
// implementation, in the order the benchmarks ran (the registration order),
// with the median ns/op; then the same grid as "x/time/rate's median over
// this one's" (above 1 is faster than x/time/rate). Floors are left out;
// benchmarks without impl, case and mode keys (the pool's) too. The full
// matrix, with confidence intervals and p-values, is benchstat's.
func summarise(w io.Writer, rawPath string) error {
	f, err := os.Open(rawPath)
	if err != nil {
		return err
	}
	defer f.Close()
	samples := map[row]map[string][]float64{}
	var rows []row
	var impls []string
	var where []benchfmt.Config // the header of the file: where it was measured
	rd := benchfmt.NewReader(f, rawPath)
	for rd.Scan() {
		res, ok := rd.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		if where == nil {
			where = res.Config
		}
		base, parts := splitName(res.Name.String())
		impl, cas, mode := parts["impl"], parts["case"], parts["mode"]
		if impl == "" || cas == "" || mode == "" || strings.HasPrefix(impl, "floor-") {
			continue
		}
		ns, ok := res.Value("sec/op")
		if !ok {
			continue
		}
		r := row{bench: base, cas: cas, mode: mode, procs: procs(res.Name.String())}
		if samples[r] == nil {
			samples[r] = map[string][]float64{}
			rows = append(rows, r)
		}
		if !slices.Contains(impls, impl) {
			impls = append(impls, impl)
		}
		samples[r][impl] = append(samples[r][impl], ns*1e9)
	}
	if err := rd.Err(); err != nil {
		return err
	}
	if len(rows) == 0 {
		return fmt.Errorf("%s: no limiter benchmarks", rawPath)
	}
	stamp(w, where)
	labelW := 0
	for _, r := range rows {
		labelW = max(labelW, utf8.RuneCountInString(r.label()))
	}

	// Both grids first, so that each column is as wide as its widest cell
	// or header, counted in runes ("±" is one column on a terminal, two
	// bytes): every value ends under its own header's end.
	noisy, cells := 0, 0
	medians := make([][]string, len(rows))
	for i, r := range rows {
		for _, im := range impls {
			c := "-"
			if v := samples[r][im]; len(v) > 0 {
				m, sp := median(v), spread(v)
				cells++
				if sp > noisySpread {
					noisy++
				}
				c = fmt.Sprintf("%.1f±%.0f", m, sp*100)
			}
			medians[i] = append(medians[i], c)
		}
	}
	var speedups [][]string
	if slices.Contains(impls, baseline) {
		speedups = make([][]string, len(rows))
		for i, r := range rows {
			b := samples[r][baseline]
			for _, im := range impls {
				c := "-"
				if v := samples[r][im]; len(v) > 0 && len(b) > 0 {
					c = fmt.Sprintf("%.2fx", median(b)/median(v))
				}
				speedups[i] = append(speedups[i], c)
			}
		}
	}
	widths := make([]int, len(impls))
	for j, im := range impls {
		widths[j] = utf8.RuneCountInString(im)
		for _, grid := range [][][]string{medians, speedups} {
			for _, cs := range grid {
				widths[j] = max(widths[j], utf8.RuneCountInString(cs[j]))
			}
		}
	}
	pad := func(s string, n int) string { return strings.Repeat(" ", max(0, n-utf8.RuneCountInString(s))) + s }
	table := func(title string, grid [][]string) {
		fmt.Fprintf(w, "%s\n%s", title, strings.Repeat(" ", labelW))
		for j, im := range impls {
			fmt.Fprint(w, " "+pad(im, widths[j])) // a space always separates cells
		}
		fmt.Fprintln(w)
		for i, r := range rows {
			fmt.Fprint(w, r.label()+strings.Repeat(" ", labelW-utf8.RuneCountInString(r.label())))
			for j := range impls {
				fmt.Fprint(w, " "+pad(grid[i][j], widths[j]))
			}
			fmt.Fprintln(w)
		}
	}
	table("median ns/op ± spread, in % of the median (half the range of the samples; lower is better)", medians)
	if noisy > 0 {
		fmt.Fprintf(w, "\nNOISY: %d of %d cells spread more than ±%.0f%%; do not trust ratios built on them (rerun on a quiet machine, or use make bench-full's -count 10).\n",
			noisy, cells, noisySpread*100)
	}
	if speedups == nil {
		return nil
	}
	fmt.Fprintln(w)
	table("speed-up over x/time/rate: its median / this one's (higher is better)", speedups)
	return nil
}

// splitName returns a benchmark's base name (without "Benchmark") and its
// key=value parts.
func splitName(full string) (string, map[string]string) {
	full = strings.TrimPrefix(full, "Benchmark")
	if i := strings.LastIndex(full, "-"); i >= 0 && strings.Trim(full[i+1:], "0123456789") == "" {
		full = full[:i]
	}
	parts := strings.Split(full, "/")
	kv := map[string]string{}
	for _, p := range parts[1:] {
		if k, v, ok := strings.Cut(p, "="); ok {
			kv[k] = v
		}
	}
	return parts[0], kv
}

// procs returns the GOMAXPROCS suffix of a benchmark name, 1 if none.
func procs(full string) int {
	i := strings.LastIndex(full, "-")
	var n int
	if i < 0 {
		return 1
	}
	if _, err := fmt.Sscanf(full[i+1:], "%d", &n); err != nil || n < 1 {
		return 1
	}
	return n
}

// noisySpread is the spread above which the summary flags a cell: a run
// whose samples of one benchmark differ by more than ±10% of their median
// cannot support the ratios it prints.
const noisySpread = 0.10

// spread returns half of v's range relative to its median; it sorts v.
func spread(v []float64) float64 {
	m := median(v)
	if m == 0 {
		return 0
	}
	return (v[len(v)-1] - v[0]) / 2 / m
}

// median returns the median of v; it sorts v.
func median(v []float64) float64 {
	slices.Sort(v)
	if n := len(v); n%2 == 1 {
		return v[n/2]
	} else {
		return (v[n/2-1] + v[n/2]) / 2
	}
}

// stampKeys are the header lines (internal/provenance) the summary repeats
// above its table, so that whoever reads the numbers sees where they were
// measured: the cache a cache-line transfer between the vCPUs goes
// through, and the clock, decide several of the ratios.
var stampKeys = []string{"cpu-model", "vcpus", "caches", "shared-cache", "virtualization", "clocksource", "counter-clock", "go", "commit", "loadavg-at-start"}

// stamp writes the header lines of a raw result named in stampKeys; an
// older file may lack some.
func stamp(w io.Writer, config []benchfmt.Config) {
	fmt.Fprintln(w, "measured on:")
	for _, k := range stampKeys {
		for _, c := range config {
			if c.Key == k && c.File {
				fmt.Fprintf(w, "  %-17s %s\n", k+":", string(c.Value))
			}
		}
	}
	fmt.Fprintln(w)
}
