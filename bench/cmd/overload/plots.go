package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plots writes overload-goodput.svg and overload-p99.svg (against the
// offered load) and overload-step-limit.svg and overload-step-p99.svg
// (over the capacity step's run), and overload-sustained-limit.svg (over
// the sustained 2x run, when there was one) into dir.
func plots(dir string, loads []float64, res map[string][]run, steps, sustained map[string]run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	byLoad := func(title, ylabel, file string, y func(run) float64) error {
		var args []any
		for _, im := range impls {
			var xy plotter.XYs
			for i, f := range loads {
				xy = append(xy, plotter.XY{X: f, Y: y(res[im.name][i])})
			}
			args = append(args, im.name, xy)
		}
		return savePlot(filepath.Join(dir, file), title, "offered load (x capacity)", ylabel, plotutil.AddLinePoints, args)
	}
	if err := byLoad("Goodput: 200s within the deadline / capacity", "goodput", "overload-goodput.svg",
		func(r run) float64 { return r.goodput }); err != nil {
		return err
	}
	if err := byLoad(fmt.Sprintf("p99 of requests not shed / service time (%v); a timeout at the deadline", *service), "p99 / service time", "overload-p99.svg",
		func(r run) float64 { return float64(min(r.p99, *deadline)) / float64(*service) }); err != nil {
		return err
	}
	if len(steps) > 0 { // not -step 0
		if err := overTimeOf(dir, steps, fmt.Sprintf("Limit through a capacity step (%d -> %d -> %d workers) at 2x", *workers, *workers/2, *workers),
			"limit", "overload-step-limit.svg", true, limits); err != nil {
			return err
		}
		if err := overTimeOf(dir, steps, "p99 of the requests not shed sent in each second, through the step; a timeout at the deadline",
			"p99 (ms)", "overload-step-p99.svg", false, p99PerSecond); err != nil {
			return err
		}
	}
	if len(sustained) == 0 {
		return nil
	}
	return overTimeOf(dir, sustained, fmt.Sprintf("Limit through a sustained 2x overload (%d workers)", *workers),
		"limit", "overload-sustained-limit.svg", true, limits)
}

// limits is a run's limit at each sample, over time.
func limits(r run) plotter.XYs {
	var xy plotter.XYs
	for _, s := range r.series {
		xy = append(xy, plotter.XY{X: s.t.Seconds(), Y: float64(s.limit)})
	}
	return xy
}

// p99PerSecond is, for each second of a run, the p99 of the requests not
// shed sent in it (as the step's table prints it; a timeout counts as the
// deadline), plotted at the middle of the second.
func p99PerSecond(r run) plotter.XYs {
	var xy plotter.XYs
	for i, sg := range segments(r, time.Second) {
		xy = append(xy, plotter.XY{X: float64(i) + 0.5, Y: float64(min(pct(sg.lat, 0.99), *deadline)) / float64(time.Millisecond)})
	}
	return xy
}

// overTimeOf plots the series xy gives of each implementation's run over
// time; implementations without a run are left out, and so is "none" if
// skipNone.
func overTimeOf(dir string, runs map[string]run, title, ylabel, file string, skipNone bool, xy func(run) plotter.XYs) error {
	var args []any
	for _, im := range impls {
		if _, ok := runs[im.name]; !ok || skipNone && im.name == "none" {
			continue
		}
		args = append(args, im.name, xy(runs[im.name]))
	}
	return savePlot(filepath.Join(dir, file), title, "time (s)", ylabel, plotutil.AddLines, args)
}

// savePlot draws the named series in args (plotutil's name, XYs pairs) with
// add and writes the plot to path.
func savePlot(path, title, xlabel, ylabel string, add func(*plot.Plot, ...any) error, args []any) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	if err := add(p, args...); err != nil {
		return err
	}
	p.Legend.Top = true
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
