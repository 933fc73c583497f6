//go:build !admit_purego

package tsc

import _ "unsafe" // for go:linkname

// monotonic returns the runtime's monotonic clock in nanoseconds, what
// time.Since reads, from an origin fixed for the process.
//
// runtime.nanotime is not API, but the runtime keeps it reachable through
// a linkname directive for the packages that rely on it. Called directly it
// skips time.Since's own work around the same read (its monotonic-bit
// check, a call, the subtraction and its overflow clamps): a keyed call on
// a held key with the counter clock off took 51.0 ns through time.Since
// and 49.1 ns through this, and every bucket reads the clock once a call
// (docs/benchmarks.md). BenchmarkNow measures both. It is isolated here;
// the admit_purego build tag swaps in mono_purego.go.
//
//go:linkname monotonic runtime.nanotime
func monotonic() int64
