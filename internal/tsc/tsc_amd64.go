//go:build !admit_purego

package tsc

import (
	"bytes"
	"os"
	"runtime"
)

// rdtsc reads the counter without waiting for earlier instructions: the
// value may be a few nanoseconds older than the call, never newer than
// the instructions that use it.
func rdtsc() uint64

// rdtscp reads the counter after every earlier instruction has executed
// and every earlier load is visible: later than the monotonic reading
// before it.
func rdtscp() uint64

func cpuid(leaf uint32) (a, b, c, d uint32)

// supported reports whether the counter can stand in for the monotonic
// clock here: see "When it is used" in the package doc.
func supported() bool {
	if runtime.GOOS != "linux" {
		return false
	}
	if max, _, _, _ := cpuid(0x8000_0000); max < 0x8000_0007 {
		return false
	}
	if _, _, _, d := cpuid(0x8000_0001); d&(1<<27) == 0 { // RDTSCP
		return false
	}
	if _, _, _, d := cpuid(0x8000_0007); d&(1<<8) == 0 { // invariant TSC
		return false
	}
	src, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && string(bytes.TrimSpace(src)) == "tsc"
}
