//go:build !amd64 || admit_purego

package tsc

// Without the counter (other architectures, or the admit_purego build),
// Enable reports false and Now reads the monotonic clock; these are never
// called on the hot path.
func rdtsc() uint64  { return 0 }
func rdtscp() uint64 { return 0 }

func supported() bool { return false }
