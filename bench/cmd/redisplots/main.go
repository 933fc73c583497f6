// Command redisplots draws the newest redisbucket measurement
// (results/redis-<date>-<host>-<commit>.txt, written by redisbucket's
// redisbench) as SVG bar charts: median decisions/s and median p99 latency
// per implementation, one group of bars per keys × goroutines case. It only
// reads text, so the bench module needs no Redis client.
//
// Run it from the bench directory: go run ./cmd/redisplots.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"github.com/admit-go/admit/internal/provenance"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func main() {
	results := flag.String("results", "../results", "directory holding results/redis-*.txt")
	in := flag.String("in", "", "result file (default: the newest redis-*.txt in -results)")
	format := flag.String("format", "svg", "svg, or png for a quick look")
	outDir := flag.String("out", "", "directory for the charts (default: <results>/plots)")
	flag.Parse()
	path := *in
	if path == "" {
		var err error
		if path, err = provenance.Newest(*results, provenance.RedisResult); err != nil {
			fail(fmt.Errorf("%w; run make bench-redis first", err))
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	// samples[case][impl][unit]
	samples := map[string]map[string]map[string][]float64{}
	var cases, impls []string
	r := benchfmt.NewReader(bytes.NewReader(b), path)
	for r.Scan() {
		res, ok := r.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		name := string(res.Name.Full())
		if !strings.HasPrefix(name, "Decision/") {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(name, "Decision/"), "/")
		if len(parts) != 3 {
			continue
		}
		c := parts[0] + " " + parts[1]
		impl := strings.TrimSuffix(strings.TrimPrefix(parts[2], "impl="), "-2")
		if i := strings.LastIndex(impl, "-"); i > 0 && strings.Trim(impl[i+1:], "0123456789") == "" {
			impl = impl[:i]
		}
		if samples[c] == nil {
			samples[c] = map[string]map[string][]float64{}
			cases = append(cases, c)
		}
		if samples[c][impl] == nil {
			samples[c][impl] = map[string][]float64{}
			if !slices.Contains(impls, impl) {
				impls = append(impls, impl)
			}
		}
		for _, v := range res.Values {
			samples[c][impl][v.Unit] = append(samples[c][impl][v.Unit], v.Value)
		}
	}
	if err := r.Err(); err != nil {
		fail(err)
	}
	if len(cases) == 0 {
		fail(fmt.Errorf("%s holds no BenchmarkDecision results", path))
	}
	if *format != "svg" && *format != "png" {
		fail(fmt.Errorf("-format %q: want svg or png", *format))
	}
	out := *outDir
	if out == "" {
		out = filepath.Join(filepath.Dir(path), "plots")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		fail(err)
	}
	base := strings.TrimSuffix(filepath.Base(path), ".txt")
	for _, chart := range []struct{ unit, file, title string }{
		{"decisions/s", "decisions", "decisions/s, median (higher is better; log scale)"},
		{"p99-µs", "p99", "p99 latency µs, median (lower is better; log scale)"},
	} {
		p := plot.New()
		p.Title.Text = "redisbucket vs go-redis/redis_rate: " + chart.title + "\n" + base + " (shared 2-core VM, noisy)"
		// Bars are drawn from 0, which a log axis cannot hold: the bars
		// are log10 of the value on a linear axis, labelled in powers of ten.
		p.Y.Tick.Marker = pow10Ticks{}
		p.Legend.Top = true
		p.Legend.Left = false
		w := vg.Points(10)
		for i, impl := range impls {
			vals := make(plotter.Values, len(cases))
			for j, c := range cases {
				v := median(samples[c][impl][chart.unit])
				if !(v > 0) {
					v = 1 // absent (batching on 10k keys) or a zero p99 bucket
				}
				vals[j] = math.Log10(v)
			}
			bars, err := plotter.NewBarChart(vals, w)
			if err != nil {
				fail(err)
			}
			bars.Offset = w * vg.Length(float64(i)-float64(len(impls)-1)/2)
			bars.Color = palette[i%len(palette)]
			bars.LineStyle.Width = 0
			p.Add(bars)
			p.Legend.Add(impl, bars)
		}
		p.NominalX(cases...)
		p.Y.Min = 0
		file := filepath.Join(out, base+"-"+chart.file+"."+*format)
		if err := p.Save(10*vg.Inch, 5*vg.Inch, file); err != nil {
			fail(err)
		}
		fmt.Fprintln(os.Stderr, "redisplots: wrote", file)
	}
}

type pow10Ticks struct{}

func (pow10Ticks) Ticks(lo, hi float64) []plot.Tick {
	var t []plot.Tick
	for k := math.Floor(lo); k <= math.Ceil(hi); k++ {
		t = append(t, plot.Tick{Value: k, Label: strconv.FormatFloat(math.Pow(10, k), 'g', -1, 64)})
		for _, m := range []float64{2, 5} {
			if v := k + math.Log10(m); v <= hi {
				t = append(t, plot.Tick{Value: v})
			}
		}
	}
	return t
}

var palette = []color.Color{
	color.RGBA{0x55, 0x55, 0x55, 0xff}, color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0xaa, 0xaa, 0xaa, 0xff}, color.RGBA{0xcc, 0xcc, 0xcc, 0xff},
	color.RGBA{0x94, 0x67, 0xbd, 0xff},
}

// median returns the median of xs (the mean of the two middle values when
// their number is even), 0 if there are none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "redisplots:", err)
	os.Exit(1)
}
