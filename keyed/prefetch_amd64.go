//go:build !admit_purego

package keyed

// prefetch asks the CPU to start bringing the cache line at addr in
// (PREFETCHT0) and returns at once: it never faults, whatever addr is, and
// a later load of the line finds it arriving or arrived. decide and
// allowLimits use it to overlap the table slot's cache miss with the clock
// read, which waits for every earlier load to finish (RDTSCP) but not for
// a prefetch. Measured on the project's 2-core machine, same binary with
// and without (docs/benchmarks.md): at 1M keys a held key's call went from
// 287 to 190 ns serially and from 129 to 81 ns in parallel; at 10k keys,
// whose slots mostly stay in cache, about 1 ns less; one hot key pays
// about 2 ns for the call. The admit_purego build tag, and other
// architectures, get prefetch_other.go's no-op.
func prefetch(addr uintptr)
