// Command plots draws the latest full benchmark result as SVG charts.
//
// It reads the newest raw result in -results (a file named
// YYYY-MM-DD-<host>-<commit>.txt, as written by cmd/report; never a
// -benchstat.txt table), or the file named by -in, and writes two charts per
// case and mode into -out:
//
//	<case>-<mode>-nsop.svg   median ns/op against GOMAXPROCS
//	<case>-<mode>-mops.svg   median Mops/s (1000 / ns/op) against GOMAXPROCS
//
// with one line per implementation, in the fixed order of bench.Impls, and
// the floors dashed in grey. Both y axes are logarithmic: the floors sit two
// orders of magnitude below the limiters. The titles name the machine; on a
// machine with fewer cores than the largest GOMAXPROCS, the extra procs
// only add goroutines, and the titles say so.
//
// Run it from the bench directory: go run ./cmd/plots.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"image/color"
	"io"
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
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/admit-go/admit/bench"

	"github.com/admit-go/admit/internal/provenance"
)

func main() {
	results := flag.String("results", "../results", "directory holding the raw results")
	in := flag.String("in", "", "raw result file to plot (default: the newest in -results)")
	outDir := flag.String("out", "", "directory for the charts (default: <results>/plots)")
	format := flag.String("format", "svg", "svg, or png for a quick look")
	flag.Parse()
	if *format != "svg" && *format != "png" {
		check(fmt.Errorf("-format %q: want svg or png", *format))
	}
	if *outDir == "" {
		*outDir = filepath.Join(*results, "plots")
	}
	path := *in
	if path == "" {
		var err error
		path, err = provenance.Newest(*results, provenance.FullResult)
		if err != nil {
			check(fmt.Errorf("%w; run make bench-full first", err))
		}
	}
	data, err := load(path)
	check(err)
	check(os.MkdirAll(*outDir, 0o755))
	n := 0
	for _, g := range data.groups {
		for _, unit := range []string{"nsop", "mops"} {
			file := filepath.Join(*outDir, g.stem+"-"+unit+"."+*format)
			check(draw1(file, *format, data, g, unit))
			n++
		}
	}
	fmt.Fprintf(os.Stderr, "plots: %d charts from %s in %s\n", n, path, *outDir)
}

// group is one chart: a benchmark with every name key fixed but impl.
type group struct {
	title string // "TryAcquire case=admit mode=parallel"
	stem  string // "admit-parallel"
	impls []string
	// ns[impl][procs] are the samples in ns/op.
	ns map[string]map[int][]float64
}

type dataset struct {
	path     string
	cpu      string
	cores    int
	maxProcs int
	groups   []*group
}

func load(path string) (*dataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &dataset{path: path}
	byKey := map[string]*group{}
	r := benchfmt.NewReader(f, path)
	for r.Scan() {
		res, ok := r.Result().(*benchfmt.Result)
		if !ok {
			continue // syntax errors and unit metadata
		}
		if d.cpu == "" {
			d.cpu = cmp.Or(res.GetConfig("cpu-model"), res.GetConfig("cpu"))
			d.cores, _ = strconv.Atoi(res.GetConfig("cores"))
		}
		ns, ok := nsPerOp(res)
		if !ok {
			continue
		}
		base, parts := res.Name.Parts()
		procs, impl := 1, ""
		var keys, vals []string
		for _, p := range parts {
			s := string(p)
			switch {
			case strings.HasPrefix(s, "-"):
				procs, _ = strconv.Atoi(s[1:])
			case strings.HasPrefix(s, "/impl="):
				impl = strings.TrimPrefix(s, "/impl=")
			default:
				k, v, _ := strings.Cut(strings.TrimPrefix(s, "/"), "=")
				keys = append(keys, k+"="+v)
				vals = append(vals, v)
			}
		}
		if impl == "" {
			continue // not a comparison across implementations
		}
		d.maxProcs = max(d.maxProcs, procs)
		id := string(base) + " " + strings.Join(keys, " ")
		g := byKey[id]
		if g == nil {
			stem := strings.Join(vals, "-")
			if b := string(base); b != "TryAcquire" && b != "Acquire" {
				stem = strings.ToLower(b) + "-" + stem
			}
			g = &group{title: id, stem: sanitize(stem), ns: map[string]map[int][]float64{}}
			byKey[id] = g
			d.groups = append(d.groups, g)
		}
		if g.ns[impl] == nil {
			g.ns[impl] = map[int][]float64{}
			g.impls = append(g.impls, impl)
		}
		g.ns[impl][procs] = append(g.ns[impl][procs], ns)
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	if len(d.groups) == 0 {
		return nil, fmt.Errorf("%s: no benchmark with an impl= key", path)
	}
	for _, g := range d.groups {
		slices.SortStableFunc(g.impls, func(a, b string) int { return cmp.Compare(rank(a), rank(b)) })
	}
	return d, nil
}

// nsPerOp finds the time per op, whichever unit the reader left it in.
func nsPerOp(res *benchfmt.Result) (float64, bool) {
	for _, v := range res.Values {
		switch v.Unit {
		case "ns/op":
			return v.Value, true
		case "sec/op":
			return v.Value * 1e9, true
		}
	}
	return 0, false
}

// rank orders impls as bench.Impls then bench.Floors, unknown names last.
func rank(impl string) int {
	for i, im := range bench.Impls {
		if im.Name == impl {
			return i
		}
	}
	for i, im := range bench.Floors {
		if im.Name == impl {
			return len(bench.Impls) + i
		}
	}
	return math.MaxInt
}

func isFloor(impl string) bool {
	im, ok := bench.Lookup(impl)
	return ok && im.Floor
}

// sanitize keeps file names to letters, digits, '-' and '_': "n=8" → "n8".
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return -1
	}, s)
}

// Colours for the implementations, in bench.Impls order; floors are grey.
var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, // mutexbucket
	color.RGBA{0xff, 0x7f, 0x0e, 0xff}, // casbucket
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, // shardedbucket
	color.RGBA{0x17, 0xbe, 0xcf, 0xff}, // gcra
	color.RGBA{0x7f, 0x7f, 0x00, 0xff}, // rate
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, // xrate
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, // juju
	color.RGBA{0x8c, 0x56, 0x4b, 0xff}, // uber
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, // anything else, in order of appearance
	color.RGBA{0xbc, 0xbd, 0x22, 0xff},
	color.RGBA{0x39, 0x3b, 0x79, 0xff},
}

func draw1(file, format string, d *dataset, g *group, unit string) error {
	p := plot.New()
	machine := d.cpu
	if d.cores > 0 {
		machine += fmt.Sprintf(", %d cores", d.cores)
		if d.maxProcs > d.cores {
			machine += fmt.Sprintf(": GOMAXPROCS above %d only adds goroutines", d.cores)
		}
	}
	what := "ns/op, median (lower is better)"
	if unit == "mops" {
		what = "Mops/s, median (higher is better)"
	}
	p.Title.Text = g.title + "\n" + what + "\n" + machine
	p.X.Label.Text = "GOMAXPROCS (-cpu)"
	p.Y.Label.Text = strings.SplitN(what, ",", 2)[0] + " (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	p.Add(plotter.NewGrid())

	// x is log2(GOMAXPROCS), labelled with GOMAXPROCS itself.
	procsSeen := map[int]bool{}
	leg := plot.NewLegend()
	leg.Top = true
	floorIdx, otherIdx := 0, 0
	for _, impl := range g.impls {
		byProcs := g.ns[impl]
		var procs []int
		for pr := range byProcs {
			procs = append(procs, pr)
			procsSeen[pr] = true
		}
		slices.Sort(procs)
		xys := make(plotter.XYs, 0, len(procs))
		for _, pr := range procs {
			y := median(byProcs[pr])
			if unit == "mops" {
				y = 1e3 / y
			}
			if !(y > 0) {
				continue
			}
			xys = append(xys, plotter.XY{X: math.Log2(float64(pr)), Y: y})
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		line.Width = vg.Points(1.5)
		points.Radius = vg.Points(2.5)
		if isFloor(impl) {
			grey := color.Gray{Y: uint8(0x40 + 0x30*floorIdx)}
			line.Color, points.Color = grey, grey
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(3 + 2*float64(floorIdx))}
			points.Shape = []draw.GlyphDrawer{draw.BoxGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{}}[floorIdx%3]
			floorIdx++
		} else {
			r := rank(impl)
			if r >= len(bench.Impls) {
				// Not in the registry (a pool benchmark, say): the
				// spare colours, in order of appearance.
				r = len(bench.Impls) + otherIdx%(len(palette)-len(bench.Impls))
				otherIdx++
			}
			c := palette[r]
			line.Color, points.Color = c, c
			points.Shape = draw.CircleGlyph{}
		}
		p.Add(line, points)
		leg.Add(impl, line, points)
	}
	var ticks []plot.Tick
	var xs []int
	for pr := range procsSeen {
		xs = append(xs, pr)
	}
	slices.Sort(xs)
	for _, pr := range xs {
		ticks = append(ticks, plot.Tick{Value: math.Log2(float64(pr)), Label: strconv.Itoa(pr)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if len(xs) > 0 {
		p.X.Min = math.Log2(float64(xs[0])) - 0.2
		p.X.Max = math.Log2(float64(xs[len(xs)-1])) + 0.2
	}

	// The legend goes to the right of the plot, not over the lines.
	const w, h = 9 * vg.Inch, 5 * vg.Inch
	var c interface {
		vg.CanvasSizer
		io.WriterTo
	}
	if format == "png" {
		c = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	} else {
		c = vgsvg.New(w, h)
	}
	dc := draw.New(c)
	r := leg.Rectangle(dc)
	legendWidth := r.Max.X - r.Min.X
	leg.YOffs = -p.Title.TextStyle.FontExtents().Height * 4
	leg.XOffs = -3 * vg.Millimeter
	leg.Draw(dc)
	p.Draw(draw.Crop(dc, 0, -legendWidth-7*vg.Millimeter, 0, 0))

	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// logTicks labels each power of ten and the 2 and 5 between them, which
// suits axes that span less than two decades.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
		}
	}
	if len(ticks) < 2 {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	return ticks
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "plots:", err)
		os.Exit(1)
	}
}
