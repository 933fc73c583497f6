//go:build !admit_purego

package admitotel

import _ "unsafe" // for go:linkname

// pin returns the id of the processor (P) the caller runs on and keeps the
// goroutine on it, not preemptible, until unpin: no other goroutine runs on
// that P meanwhile, so between pin and unpin the caller is the only writer
// of that P's counters. Nothing between them may block.
//
// runtime.procPin is not API, but the runtime keeps it reachable through a
// linkname directive for the packages that rely on it (shardedbucket picks
// its home shard the same way). The admit_purego build tag swaps in
// home_purego.go.
func pin() uint { return uint(procPin()) }

func unpin() { procUnpin() }

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()
