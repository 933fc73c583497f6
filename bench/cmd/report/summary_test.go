package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSummaryStamp checks that the summary repeats where a result was
// measured, from the raw file's header, above its table.
func TestSummaryStamp(t *testing.T) {
	raw := `cpu-model: AMD EPYC Processor (family 26 model 17 stepping 0)
cores: 2
vcpus: 2, 1 thread(s) per core
shared-cache: none
clocksource: kvm-clock
counter-clock: off (internal/tsc: clocksource kvm-clock, constant_tsc; or the admit_purego build): keyed's system clock is time.Since
go: go1.26.8
BenchmarkTryAcquire/case=mixed/mode=parallel/impl=mutexbucket-2 	 1000	 40.0 ns/op
BenchmarkTryAcquire/case=mixed/mode=parallel/impl=shardedbucket-2 	 1000	 30.0 ns/op
`
	got := summarize(t, raw)
	for _, want := range []string{
		"measured on:",
		"cpu-model:        AMD EPYC Processor (family 26 model 17 stepping 0)",
		"shared-cache:     none",
		"clocksource:      kvm-clock",
		"counter-clock:    off",
		"mixed parallel -cpu 2",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "measured on:") > strings.Index(got, "median ns/op") {
		t.Errorf("the stamp comes after the table:\n%s", got)
	}
}

// TestSummaryColumns checks that every value ends where its column's
// header ends, counted in runes ("±" is two bytes), and that headers are
// not cut short, with values wider than some names.
func TestSummaryColumns(t *testing.T) {
	raw := `go: go1.26.8
BenchmarkTryAcquire/case=admit/mode=serial/impl=shardedbucket 	 1000	 37.0 ns/op
BenchmarkTryAcquire/case=admit/mode=serial/impl=shardedbucket 	 1000	 38.0 ns/op
BenchmarkTryAcquire/case=admit/mode=serial/impl=gcra 	 1000	 190.0 ns/op
BenchmarkTryAcquire/case=admit/mode=serial/impl=gcra 	 1000	 250.0 ns/op
BenchmarkTryAcquire/case=admit/mode=serial/impl=xrate 	 1000	 84.0 ns/op
BenchmarkTryAcquire/case=admit/mode=parallel/impl=shardedbucket-2 	 1000	 19.0 ns/op
BenchmarkTryAcquire/case=admit/mode=parallel/impl=xrate-2 	 1000	 105.0 ns/op
BenchmarkAcquire/case=rarewait/mode=parallel/impl=xrate-8 	 1000	 1105.0 ns/op
`
	out := summarize(t, raw)
	impls := []string{"shardedbucket", "gcra", "xrate"}
	var ends []int // the rune index just past each header name
	tables := 0
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		r := []rune(line)
		if strings.HasSuffix(line, " xrate") {
			tables++
			ends = ends[:0]
			for _, im := range impls {
				i := strings.Index(line, " "+im+" ")
				if im == "xrate" {
					i = strings.LastIndex(line, " "+im)
				}
				if i < 0 {
					t.Fatalf("header %q lacks %q (cut short?)", line, im)
				}
				ends = append(ends, len([]rune(line[:i]))+1+len([]rune(im)))
			}
			continue
		}
		if len(ends) == 0 || !strings.Contains(line, "-cpu") {
			continue
		}
		for k, e := range ends {
			if e > len(r) || r[e-1] == ' ' || e < len(r) && r[e] != ' ' {
				t.Errorf("row %q: the %s value does not end under its header (rune %d)", line, impls[k], e)
			}
		}
	}
	if tables != 2 {
		t.Errorf("%d tables with headers, want 2:\n%s", tables, out)
	}
	if !strings.Contains(out, "220.0±14") {
		t.Errorf("no wide value in the summary:\n%s", out)
	}
}

// TestStatTables checks benchstat's tables: one per benchmark, x/time/rate
// the first (base) column wherever the benchmark has it, the pool's
// implementations in the order they ran.
func TestStatTables(t *testing.T) {
	raw := `go: go1.26.8
BenchmarkTryAcquire/case=admit/mode=serial/impl=mutexbucket 	 1000	 37.0 ns/op
BenchmarkTryAcquire/case=admit/mode=serial/impl=xrate 	 1000	 84.0 ns/op
BenchmarkTryAcquire/case=admit/mode=serial/impl=floor-since 	 1000	 4.0 ns/op
BenchmarkAcquire/case=rarewait/mode=serial/impl=mutexbucket 	 1000	 49.0 ns/op
BenchmarkAcquire/case=rarewait/mode=serial/impl=xrate 	 1000	 99.0 ns/op
BenchmarkAcquire/case=rarewait/mode=serial/impl=uber 	 1000	 49.0 ns/op
BenchmarkPool/case=uncontended/impl=chanpool 	 1000	 60.0 ns/op
BenchmarkPool/case=uncontended/impl=puddle 	 1000	 300.0 ns/op
BenchmarkTryAcquire/case=admit/mode=serial/impl=mutexbucket-2 	 1000	 37.0 ns/op
`
	path := filepath.Join(t.TempDir(), "raw.txt")
	if err := os.WriteFile(path, []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := statTables(path)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"-filter", ".name:TryAcquire", "-col", "/impl@(xrate mutexbucket floor-since)", path},
		{"-filter", ".name:Acquire", "-col", "/impl@(xrate mutexbucket uber)", path},
		{"-filter", ".name:Pool", "-col", "/impl@(chanpool puddle)", path},
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("statTables:\n got %q\nwant %q", got, want)
	}
	if w := benchprocWord("-x y"); w != `"-x y"` {
		t.Errorf("benchprocWord(%q) = %s, want it quoted", "-x y", w)
	}
}

// summarize writes raw as a raw results file and returns what printSections
// prints for it.
func summarize(t *testing.T, raw string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "raw.txt")
	if err := os.WriteFile(path, []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printSections(&out, path); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
