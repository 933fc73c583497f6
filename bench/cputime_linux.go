//go:build linux

package bench

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time the calling OS thread has used (user and
// system), and true. The caller must hold its goroutine on the thread
// (runtime.LockOSThread) for differences to mean anything.
func threadCPU() (time.Duration, bool) { return rusage(1) } // RUSAGE_THREAD

// processCPU returns the CPU time all the process's threads have used.
func processCPU() (time.Duration, bool) { return rusage(syscall.RUSAGE_SELF) }

func rusage(who int) (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
