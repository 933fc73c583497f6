//go:build !admit_purego

package keyed

// prefetch asks the CPU to start bringing the cache line at addr in
// (PREFETCHT0) and returns at once: it never faults, whatever addr is, and
// a later load of the line finds it arriving or arrived. decide and allowLimits use it
// to overlap the table slot's cache miss with the clock read, which waits
// for every earlier load to finish (RDTSCP) but not for a prefetch. On
// this project's machine it takes about 10% off a held key's call at 10k
// keys (docs/keyed.md). The admit_purego build tag, and other
// architectures, get prefetch_other.go's no-op.
func prefetch(addr uintptr)
