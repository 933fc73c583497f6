package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// machine adds to the provenance header what a Redis comparison depends on
// beyond the CPU model: the vCPUs, which caches they share (sysfs cache
// topology of cpu0), and the kernel's clock source.
func machine(w io.Writer) {
	fmt.Fprintf(w, "vcpus: %d\n", runtime.NumCPU())
	var caches []string
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*")
	for _, d := range dirs {
		read := func(f string) string {
			b, _ := os.ReadFile(filepath.Join(d, f))
			return strings.TrimSpace(string(b))
		}
		caches = append(caches, fmt.Sprintf("L%s %s %s shared by cpus %s", read("level"), read("type"), read("size"), read("shared_cpu_list")))
	}
	if len(caches) == 0 {
		caches = []string{"unknown"}
	}
	fmt.Fprintf(w, "caches-of-cpu0: %s\n", strings.Join(caches, "; "))
	cs, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	if err != nil {
		cs = []byte("unknown")
	}
	fmt.Fprintf(w, "clocksource: %s\n", strings.TrimSpace(string(cs)))
}
