//go:build amd64 && !admit_purego && !admit_nocounter

package tsc

import (
	"bytes"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// supported reports whether the counter can stand in for the monotonic
// clock here: see "When it is used" in the package doc.
func supported() bool {
	if !cpuSupported() {
		return false
	}
	var mode int32 // a process that made RDTSC fault must not execute it
	if err := unix.Prctl(unix.PR_GET_TSC, uintptr(unsafe.Pointer(&mode)), 0, 0, 0); err != nil || mode != unix.PR_TSC_ENABLE {
		return false
	}
	src, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && string(bytes.TrimSpace(src)) == "tsc"
}
