//go:build !admit_purego

package tsc

// rdtsc reads the counter without waiting for earlier instructions: the
// value may be a few nanoseconds older than the call, never newer than
// the instructions that use it.
func rdtsc() uint64

// rdtscp reads the counter after every earlier instruction has executed
// and every earlier load is visible: later than the monotonic reading
// before it.
func rdtscp() uint64

func cpuid(leaf uint32) (a, b, c, d uint32)

// cpuSupported reports whether the processor's counter runs at a constant
// rate in every power state (invariant TSC) and it has RDTSCP.
func cpuSupported() bool {
	if max, _, _, _ := cpuid(0x8000_0000); max < 0x8000_0007 {
		return false
	}
	if _, _, _, d := cpuid(0x8000_0001); d&(1<<27) == 0 { // RDTSCP
		return false
	}
	_, _, _, d := cpuid(0x8000_0007)
	return d&(1<<8) != 0 // invariant TSC
}
