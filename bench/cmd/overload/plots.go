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
// (over the capacity step's run) into dir.
func plots(dir string, loads []float64, res map[string][]run, steps map[string]run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	byLoad := func(title, ylabel, file string, y func(run) float64) error {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "offered load (x capacity)"
		p.Y.Label.Text = ylabel
		var args []any
		for _, im := range impls {
			var xy plotter.XYs
			for i, f := range loads {
				xy = append(xy, plotter.XY{X: f, Y: y(res[im.name][i])})
			}
			args = append(args, im.name, xy)
		}
		if err := plotutil.AddLinePoints(p, args...); err != nil {
			return err
		}
		p.Legend.Top = true
		return p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, file))
	}
	if err := byLoad("Goodput: 200s within the deadline / capacity", "goodput", "overload-goodput.svg",
		func(r run) float64 { return r.goodput }); err != nil {
		return err
	}
	if err := byLoad(fmt.Sprintf("p99 of requests not shed / service time (%v); a timeout at the deadline", *service), "p99 / service time", "overload-p99.svg",
		func(r run) float64 { return float64(min(r.p99, *deadline)) / float64(*service) }); err != nil {
		return err
	}
	overTime := func(title, ylabel, file string, skipNone bool, y func(sample) float64) error {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "time (s)"
		p.Y.Label.Text = ylabel
		var args []any
		for _, im := range impls {
			if skipNone && im.name == "none" {
				continue
			}
			var xy plotter.XYs
			for _, s := range steps[im.name].series {
				xy = append(xy, plotter.XY{X: s.t.Seconds(), Y: y(s)})
			}
			args = append(args, im.name, xy)
		}
		if err := plotutil.AddLines(p, args...); err != nil {
			return err
		}
		p.Legend.Top = true
		return p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, file))
	}
	if err := overTime(fmt.Sprintf("Limit through a capacity step (%d -> %d -> %d workers) at 2x", *workers, *workers/2, *workers),
		"limit", "overload-step-limit.svg", true, func(s sample) float64 { return float64(s.limit) }); err != nil {
		return err
	}
	return overTime("p99 of requests not shed per 100 ms through the step; a timeout at the deadline", "p99 (ms)", "overload-step-p99.svg", false,
		func(s sample) float64 { return float64(min(s.p99, *deadline)) / float64(time.Millisecond) })
}
