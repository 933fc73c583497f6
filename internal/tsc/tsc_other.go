//go:build !amd64 || admit_purego

package tsc

// Without the counter (other architectures, or the admit_purego build),
// Enable reports false, so Now is never called and these never run.
func rdtsc() uint64  { return 0 }
func rdtscp() uint64 { return 0 }
