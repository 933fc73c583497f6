package bench

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's run, tests and benchmarks alike, when a
// goroutine outlives them. Before that it warns when benchmarks are run with
// a -cpu list (see cpuListWarning).
func TestMain(m *testing.M) {
	flag.Parse()
	if b := flag.Lookup("test.bench"); b != nil && b.Value.String() != "" {
		if w := cpuListWarning(flag.Lookup("test.cpu").Value.String()); w != "" {
			fmt.Fprintln(os.Stderr, w)
		}
	}
	goleak.VerifyTestMain(m)
}

// cpuListWarning returns a warning for a -cpu list of more than one distinct
// value, "" otherwise. With such a list the testing package runs the first
// sample of each benchmark before it sets GOMAXPROCS to the first value: the
// sample runs under whatever the previous benchmark left, its last -cpu
// value (golang/go#49980). A benchmark on b.Loop, as every serial mode here
// is, is timed entirely in that first call, so its first -cpu sample
// is measured at the wrong GOMAXPROCS and labelled with the right one: under
// -cpu 1,2 -count 1 every "-cpu 1" serial sample really ran at GOMAXPROCS 2.
// (A RunParallel benchmark only has its one-iteration probe there.)
// cmd/report and ab.sh run one go test per -cpu value for this reason.
// The line starts with an upper-case word so that benchfmt, which reads
// "key: value" lines as configuration, does not take it for one.
func cpuListWarning(cpu string) string {
	var vals []string
	for _, v := range strings.Split(cpu, ",") {
		if v = strings.TrimSpace(v); v != "" && !slices.Contains(vals, v) {
			vals = append(vals, v)
		}
	}
	if len(vals) < 2 {
		return ""
	}
	return fmt.Sprintf("WARNING: package bench, -cpu %s: the first sample of each b.Loop benchmark (every serial mode) at -cpu %s runs under the GOMAXPROCS the previous benchmark left (golang/go#49980); run one go test per -cpu value, as cmd/report does", cpu, vals[0])
}

// TestCPUListWarning checks when the warning is given: for two or more
// distinct -cpu values, not for one value or a repeated one.
func TestCPUListWarning(t *testing.T) {
	for cpu, warn := range map[string]bool{"": false, "2": false, "2,2": false, "1,2": true, "1,2,4,8": true, "2,1": true} {
		if got := cpuListWarning(cpu) != ""; got != warn {
			t.Errorf("cpuListWarning(%q) warns: %v, want %v", cpu, got, warn)
		}
	}
}
