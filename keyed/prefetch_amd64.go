//go:build !admit_purego

package keyed

import "unsafe"

// prefetchw asks the CPU to start bringing the cache line at p in for
// writing (PREFETCHW: the line arrives owned, as a store would take it) and
// returns at once: it never faults, whatever p is. decide uses it on the
// line of the state word it is about to CAS (for a quarter of the 48-byte
// entries not the entry's first line), before it reads the clock and the
// entry's key:
// a load first would fetch the line shared, and the CAS would then need a
// second transfer to own it, each a round trip to the core that last wrote
// the line when another core calls for the same key; and the clock read,
// which waits for earlier loads but not for a prefetch, overlaps the
// transfer. On a CPU without PREFETCHW (CPUID 0x80000001 ECX bit 8:
// Intel before Broadwell) it issues PREFETCHT0 instead. The admit_purego
// build tag, and other architectures, get prefetch_other.go's no-op.
//
// Measured on the project's 2-vCPU Intel machine (its vCPUs share an L3,
// and other work shared them): no difference from PREFETCHT0 on the same
// entry at 10k or 1M keys, serially or on two cores (12 alternating rounds,
// docs/benchmarks.md); the round trip it saves is expected to matter where
// a transfer between cores is dear (no shared cache), which that machine
// cannot show. The prefetch itself, before the clock read,
// replaces one of the home slot: together with the tagged table, 1M keys
// went from 361 to 325 ns serially there.
func prefetchw(p unsafe.Pointer)

// hasPrefetchW reports whether the CPU has PREFETCHW; prefetchw reads it.
var hasPrefetchW = cpuPrefetchW()

// cpuPrefetchW reads CPUID for PREFETCHW.
func cpuPrefetchW() bool
