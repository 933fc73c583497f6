package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/perf/benchfmt"

	"github.com/admit-go/admit/internal/tsc"
)

// The keyed part of make bench: keyed against its peers at 10k held keys
// (BenchmarkKeyed, -cpu 2), and one Limiter's scaling from one core to two
// (BenchmarkKeyedScaling, -cpu 1 and -cpu 2), so that a user sees on their
// own machine whether docs/keyed.md's claims hold there. keyedRounds rounds
// of one sample per case, each round running every case, so that a slow
// phase of a shared machine falls on every implementation alike. About half
// a minute on the 2-core machine it was written on.
const (
	keyedRounds    = 6
	keyedBench     = "^BenchmarkKeyed$/keys=10k/"
	scalingBench   = "^BenchmarkKeyedScaling$"
	keyedBenchtime = "200000x"
)

// keyedReport runs the keyed benchmarks and writes their summary to w: the
// median ns/op of keyed and of its fastest peer, serial and parallel, with
// their ratio; and the scaling ratio (ns/op at -cpu 1 over ns/op at -cpu 2:
// throughput at two cores over one; 2 is perfect, below 1 a second core slows
// every call) of one keyed.Limiter walking all keys, visiting them in random
// orders and walking disjoint halves, beside two separate Limiters and the
// fastest parallel peer. The raw output goes to rawPath.
func keyedReport(w io.Writer, goCmd, rawPath string) error {
	var raw bytes.Buffer
	run := func(bench, cpu string) error {
		cmd := exec.Command(goCmd, "test", "-run", "^$", "-bench", bench, "-cpu", cpu, "-count", "1", "-benchtime", keyedBenchtime, ".")
		cmd.Stdout, cmd.Stderr = &raw, &raw
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go test -bench %s -cpu %s: %v\n%s", bench, cpu, err, raw.String())
		}
		return nil
	}
	for range keyedRounds {
		for _, r := range []struct{ bench, cpu string }{{keyedBench, "2"}, {scalingBench, "1"}, {scalingBench, "2"}} {
			if err := run(r.bench, r.cpu); err != nil {
				return err
			}
		}
	}
	if err := os.WriteFile(rawPath, raw.Bytes(), 0o644); err != nil {
		return err
	}
	// ns[bench/case][impl][procs] are the samples in ns/op.
	ns := map[string]map[string]map[int][]float64{}
	rd := benchfmt.NewReader(bytes.NewReader(raw.Bytes()), rawPath)
	for rd.Scan() {
		res, ok := rd.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		base, parts := splitName(res.Name.String())
		v, ok := res.Value("sec/op")
		if !ok {
			continue
		}
		k := base + "/" + parts["mode"] + parts["pattern"]
		if ns[k] == nil {
			ns[k] = map[string]map[int][]float64{}
		}
		if ns[k][parts["impl"]] == nil {
			ns[k][parts["impl"]] = map[int][]float64{}
		}
		p := procs(res.Name.String())
		ns[k][parts["impl"]][p] = append(ns[k][parts["impl"]][p], v*1e9)
	}
	if err := rd.Err(); err != nil {
		return err
	}
	med := func(k, impl string, p int) float64 {
		if v := ns[k][impl][p]; len(v) > 0 {
			return median(v)
		}
		return 0
	}
	clock := "on (internal/tsc: the timestamp counter, as the kernel's clocksource is tsc)"
	if !tsc.Enable() {
		clock = "off (the runtime's monotonic clock: no invariant counter the kernel uses, another platform, or -tags admit_nocounter or admit_purego)"
	}
	fmt.Fprintf(w, "\nkeyed at 10k held keys, -cpu 2, median of %d rounds; keyed's counter clock %s\n", keyedRounds, clock)
	for _, mode := range []string{"serial", "parallel"} {
		k := "Keyed/" + mode
		best, bestNs := "", 0.0
		for impl := range ns[k] {
			if m := med(k, impl, 2); impl != "keyed" && m > 0 && (bestNs == 0 || m < bestNs) {
				best, bestNs = impl, m
			}
		}
		if kn := med(k, "keyed", 2); kn > 0 && bestNs > 0 {
			fmt.Fprintf(w, "  %-8s keyed %6.1f ns/op, fastest peer %-13s %6.1f ns/op: keyed %.2fx faster\n", mode, kn, best, bestNs, bestNs/kn)
		}
	}
	fmt.Fprintf(w, "scaling, throughput at -cpu 2 / -cpu 1 (2 is perfect; below 1 a second core slows every call):\n")
	scale := func(pattern, impl string) string {
		k := "KeyedScaling/" + pattern
		one, two := med(k, impl, 1), med(k, impl, 2)
		if one == 0 || two == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f (%.1f -> %.1f ns/op)", one/two, one, two)
	}
	fmt.Fprintf(w, "  one Limiter, every goroutine walks all keys:  %s\n", scale("walk", "keyed"))
	fmt.Fprintf(w, "  one Limiter, all keys in random orders:       %s\n", scale("shuffle", "keyed"))
	fmt.Fprintf(w, "  one Limiter, disjoint halves of the keys:     %s\n", scale("halves", "keyed"))
	fmt.Fprintf(w, "  two Limiters, one half each (the reference):  %s\n", scale("halves", "keyed-split"))
	fmt.Fprintf(w, "  syncmap-xrate, walking all keys:              %s\n", scale("walk", "syncmap-xrate"))
	fmt.Fprintf(w, "  syncmap-xrate, all keys in random orders:     %s\n", scale("shuffle", "syncmap-xrate"))
	fmt.Fprintf(w, "Raw output in bench/%s. With two cores busy with other work, -cpu 2 has no second core to use: read these on a quiet machine.\n", strings.TrimPrefix(rawPath, "./"))
	return nil
}
