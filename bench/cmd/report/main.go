// Command report runs the benchmarks of package bench and summarises them
// with benchstat, one table per benchmark (TryAcquire, Acquire, Pool), each
// with one row per case and mode and one column per implementation
// (benchstat -col /impl), compared with x/time/rate (the pool's with
// chanpool, its first implementation): see statTables.
//
// Run it from the bench directory:
//
//	go run ./cmd/report -quick        # make bench: a subset, summary to stdout
//	go run ./cmd/report               # make bench-full: writes ../results/
//
// Both print a summary: one row per case, mode and GOMAXPROCS, one column
// per implementation with its median ns/op, then each one's speed-up over
// x/time/rate. Each column is as wide as its implementation's name or its
// widest value: the quick run's fits a 100-column terminal, the full run's
// (Acquire's longer row names, uber's column) takes about 110. The full benchstat matrix goes
// to a file (bench/bench.tmp-benchstat.txt for -quick), and the output says
// where.
//
// The full run writes two files into -results:
//
//	<YYYY-MM-DD>-<short host>-<short commit>.txt            raw go test output
//	<YYYY-MM-DD>-<short host>-<short commit>-benchstat.txt  the benchstat table
//
// The raw file starts with a header of "key: value" lines (see
// internal/provenance: the machine, its CPU model, vCPUs and which caches
// they share, its clock source and whether keyed's counter clock is on, Go
// version, commit, date, load and the exact command), which benchstat and
// benchfmt read as configuration, so the table repeats them; the summary
// prints them above its table, for make bench as well.
//
// benchstat is run with "go run golang.org/x/perf/cmd/benchstat" from this
// module, so its version is the one bench/go.mod requires and a fresh clone
// needs nothing but the go command.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/perf/benchfmt"

	"github.com/admit-go/admit/internal/provenance"
)

// The full run: every benchmark of package bench at four GOMAXPROCS values,
// ten samples each, as docs/design.md asks of committed results.
//
// Sizing, for the 2-core machine this was written on: BenchmarkTryAcquire
// has 5 cases × 2 modes × 10 implementations and floors (uber has no
// TryAcquire) = 100 sub-benchmarks, BenchmarkAcquire 1 case × 2 modes × 11
// = 22, BenchmarkPool 4 cases × 3 pools = 12, 134 in all; × 4 -cpu values
// × 10 counts = 5360 runs. At -benchtime 150ms a run measured 0.21–0.22 s
// wall (b.Loop stops near one benchtime; RunParallel's b.N ramp overshoots
// it by about a fifth; each round starts with a GC), so the full run takes
// about 19 minutes, the limiters' 4880 runs about 17 of them.
// BenchmarkKeyed is left out (its 1M-key cases fill a million keys per run,
// minutes more at these settings): make bench-keyed runs it at -cpu 2.
const (
	fullBench     = "^Benchmark(TryAcquire|Acquire|Pool)$"
	fullCPU       = "1,2,4,8"
	fullCount     = 10
	fullBenchtime = "150ms"
)

// The quick run behind make bench: the two cases that bracket a limiter's
// cost (every call admitted, every call rejected), both modes, every
// implementation and floor; -cpu 1,2; six samples, the fewest for which
// benchstat prints a confidence interval. About a minute on the same
// machine.
const (
	quickBench     = "TryAcquire/case=(admit|reject)/"
	quickCPU       = "1,2"
	quickCount     = 6
	quickBenchtime = "100ms"
	quickOut       = "bench.tmp.txt"           // in bench/, ignored by git
	quickStat      = "bench.tmp-benchstat.txt" // likewise
	quickKeyed     = "bench.tmp-keyed.txt"     // keyed's part (keyed.go), likewise
)

func main() {
	log := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "report: "+format+"\n", args...) }

	quick := flag.Bool("quick", false, "run the quick subset and print the table to stdout instead of writing results/")
	results := flag.String("results", "../results", "directory for the full run's files")
	bench := flag.String("bench", "", "go test -bench pattern (default: the mode's)")
	cpu := flag.String("cpu", "", "go test -cpu list (default: the mode's)")
	count := flag.Int("count", 0, "go test -count (default: the mode's)")
	benchtime := flag.String("benchtime", "", "go test -benchtime (default: the mode's)")
	summaryOf := flag.String("summary", "", "print the summary of an existing raw output file and exit")
	flag.Parse()
	if *summaryOf != "" {
		if err := printSections(os.Stdout, *summaryOf); err != nil {
			log("summary: %v", err)
			os.Exit(1)
		}
		return
	}

	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	if *quick {
		def(bench, quickBench)
		def(cpu, quickCPU)
		def(benchtime, quickBenchtime)
		if *count == 0 {
			*count = quickCount
		}
	} else {
		def(bench, fullBench)
		def(cpu, fullCPU)
		def(benchtime, fullBenchtime)
		if *count == 0 {
			*count = fullCount
		}
	}

	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	if _, err := os.Stat("go.mod"); err != nil {
		log("run me from the bench directory (go run ./cmd/report): %v", err)
		os.Exit(2)
	}

	// One go test per GOMAXPROCS value, not one -cpu list: with a list, the
	// first sample of every benchmark runs under the GOMAXPROCS the previous
	// benchmark left behind, its last -cpu value (golang/go#49980). A
	// shardedbucket built there had 8 shards in a "-cpu 1" row, and each
	// -cpu 1 row held one such sample in ten.
	cpus := strings.Split(*cpu, ",")
	argsFor := func(c string) []string {
		return []string{"test", "-run", "^$", "-bench", *bench, "-cpu", c,
			"-count", fmt.Sprint(*count), "-benchtime", *benchtime, "."}
	}
	command := "cd bench && " + goCmd + " " + shellJoin(argsFor(cpus[0]))
	if len(cpus) > 1 {
		one := strings.Replace(shellJoin(argsFor("CPU")), " -cpu CPU ", " -cpu $c ", 1)
		command = "cd bench && for c in " + strings.Join(cpus, " ") + "; do " + goCmd + " " + one + "; done"
	}

	var rawPath, statPath string
	if *quick {
		rawPath, statPath = quickOut, quickStat
	} else {
		if err := os.MkdirAll(*results, 0o755); err != nil {
			log("%v", err)
			os.Exit(1)
		}
		commit, _ := provenance.Commit()
		stem := fmt.Sprintf("%s-%s-%s", time.Now().Format("2006-01-02"), shortHost(), commit)
		rawPath = filepath.Join(*results, stem+".txt")
		statPath = filepath.Join(*results, stem+"-benchstat.txt")
		if _, err := os.Stat(rawPath); err == nil {
			log("overwriting %s", rawPath)
		}
	}

	raw, err := os.Create(rawPath)
	if err != nil {
		log("%v", err)
		os.Exit(1)
	}
	header(raw, goCmd, command)

	// The full run streams to the terminal too, as progress; it takes
	// about 19 minutes.
	var out io.Writer = raw
	if !*quick {
		out = io.MultiWriter(raw, os.Stdout)
	}
	log("%s", command)
	loadBefore := loadAvg()
	start := time.Now()
	var runErr error
	for _, c := range cpus {
		cmd := exec.Command(goCmd, argsFor(c)...)
		cmd.Stdout, cmd.Stderr = out, out
		if runErr = cmd.Run(); runErr != nil {
			break
		}
	}
	if err := raw.Close(); err != nil {
		log("%v", err)
		os.Exit(1)
	}
	log("benchmarks took %v; raw output in %s", time.Since(start).Round(time.Second), rawPath)
	if runErr != nil {
		log("go test: %v", runErr)
		os.Exit(1)
	}

	// benchstat, every unit (admit/op included), into the table file; the
	// terminal gets the summary a person reads at a glance.
	tables, err := statTables(rawPath)
	if err != nil {
		log("benchstat: %v", err)
		os.Exit(1)
	}
	var f bytes.Buffer
	fmt.Fprintf(&f, "# benchmarks: %s\n", command)
	for _, args := range tables {
		statArgs := append([]string{"run", "golang.org/x/perf/cmd/benchstat"}, args...)
		var table bytes.Buffer
		st := exec.Command(goCmd, statArgs...)
		st.Stdout, st.Stderr = &table, os.Stderr
		if err := st.Run(); err != nil {
			log("benchstat: %v", err)
			os.Exit(1)
		}
		fmt.Fprintf(&f, "\n# benchstat: cd bench && %s %s\n\n", goCmd, shellJoin(statArgs))
		f.Write(table.Bytes())
	}
	if err := os.WriteFile(statPath, f.Bytes(), 0o644); err != nil {
		log("%v", err)
		os.Exit(1)
	}
	if err := printSections(os.Stdout, rawPath); err != nil {
		log("summary: %v", err)
		os.Exit(1)
	}
	if *quick {
		if err := keyedReport(os.Stdout, goCmd, quickKeyed); err != nil {
			log("keyed: %v", err)
			os.Exit(1)
		}
	}
	if load := max(loadBefore, loadAvg()); load > float64(runtime.NumCPU()) {
		fmt.Printf("\nNOISY: the 1-minute load average was %.1f on %d cores during the run; other work shared the CPUs, so the numbers above are not this machine's.\n",
			load, runtime.NumCPU())
	}
	fmt.Printf("\nThe full benchstat matrix (every unit, confidence intervals, p-values against x/time/rate; the pool's against chanpool) is in bench/%s;\nthe raw output in bench/%s.\n",
		filepath.Clean(statPath), filepath.Clean(rawPath))
}

// statTables returns benchstat's arguments for each table of rawPath: one
// per benchmark (TryAcquire, Acquire, Pool, in the order they ran), so
// that no table mixes families whose implementations differ (a pool has
// no x/time/rate to be compared with, uber no TryAcquire, and benchstat's
// geomean over a set of rows that differs from the base column's is "?").
// The columns are the implementations in the order they ran, but with the
// summary's baseline (xrate) first wherever the benchmark has it:
// benchstat compares every column with the first, so its deltas and
// p-values are against the same implementation as the summary's speed-ups.
func statTables(rawPath string) ([][]string, error) {
	f, err := os.Open(rawPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var benches []string
	impls := map[string][]string{}
	rd := benchfmt.NewReader(f, rawPath)
	for rd.Scan() {
		res, ok := rd.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		base, parts := splitName(res.Name.String())
		if !slices.Contains(benches, base) {
			benches = append(benches, base)
		}
		if im := parts["impl"]; im != "" && !slices.Contains(impls[base], im) {
			impls[base] = append(impls[base], im)
		}
	}
	if err := rd.Err(); err != nil {
		return nil, err
	}
	if len(benches) == 0 {
		return nil, fmt.Errorf("%s: no benchmarks", rawPath)
	}
	var tables [][]string
	for _, b := range benches {
		col := "/impl"
		if ims := impls[b]; len(ims) > 0 {
			if i := slices.Index(ims, baseline); i > 0 {
				ims = append([]string{baseline}, slices.Delete(slices.Clone(ims), i, i+1)...)
			}
			words := make([]string, len(ims))
			for i, im := range ims {
				words[i] = benchprocWord(im)
			}
			// A fixed order also filters: it names every implementation.
			col = "/impl@(" + strings.Join(words, " ") + ")"
		}
		tables = append(tables, []string{"-filter", ".name:" + benchprocWord(b), "-col", col, rawPath})
	}
	return tables, nil
}

// benchprocWord writes s as one word of benchstat's filter and projection
// syntax: bare where it may be, else a quoted Go string.
func benchprocWord(s string) string {
	if s != "" && !strings.ContainsAny(s[:1], "-*\"") && !strings.ContainsAny(s, " ():@,\"") {
		return s
	}
	return strconv.Quote(s)
}

// sections are what the report prints after a run (and for -summary), in
// order, each read from the raw output file, whose header says where it was
// measured (summarise repeats it). keyed's ratio against its fastest peer
// and its scaling ratio (one Limiter over held keys, throughput at -cpu 2
// over -cpu 1) belong here: add their benchmarks to quickBench and
// fullBench, and a section that reads them from the same file.
var sections = []func(w io.Writer, rawPath string) error{summarise}

// printSections prints every section of rawPath, a blank line between.
func printSections(w io.Writer, rawPath string) error {
	for i, section := range sections {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := section(w, rawPath); err != nil {
			return err
		}
	}
	return nil
}

// loadAvg returns the 1-minute load average, or 0 where /proc/loadavg is
// not there (outside Linux).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscanf(string(b), "%f", &l)
	return l
}

// header writes the run's provenance; see package provenance.
func header(w io.Writer, goCmd, command string) {
	goVersion := "unknown"
	if out, err := exec.Command(goCmd, "version").Output(); err == nil {
		goVersion = strings.TrimPrefix(strings.TrimSpace(string(out)), "go version ")
	}
	provenance.Write(w, goVersion, command)
}

// shortHost is the host name up to its first dot.
func shortHost() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "host"
	}
	h, _, _ = strings.Cut(h, ".")
	return h
}

// shellJoin quotes args for a POSIX shell where they need it, so that the
// recorded command can be pasted back.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./,=:", r))
		}) < 0 {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
