package main

import (
	"bytes"
	"os"
	"path/filepath"
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
	path := filepath.Join(t.TempDir(), "raw.txt")
	if err := os.WriteFile(path, []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printSections(&out, path); err != nil {
		t.Fatal(err)
	}
	got := out.String()
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
