//go:build linux && amd64 && !admit_purego

package keyed

import (
	"os"
	"strings"
	"testing"
	"unsafe"
)

// TestPrefetchW: the CPUID check agrees with the kernel's reading of the
// same bit (3dnowprefetch in /proc/cpuinfo), and a prefetch, of nil too,
// does not fault.
func TestPrefetchW(t *testing.T) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f, ok := strings.CutPrefix(line, "flags"); ok {
			want := strings.Contains(f+" ", " 3dnowprefetch ")
			if hasPrefetchW != want {
				t.Fatalf("CPUID says PREFETCHW %v, /proc/cpuinfo %v", hasPrefetchW, want)
			}
			break
		}
	}
	var x int
	prefetchw(unsafe.Pointer(&x))
	prefetchw(nil)
}
