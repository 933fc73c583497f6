//go:build !admit_purego

package shardedbucket

import _ "unsafe" // for go:linkname

// home returns a hint for the caller's home shard: the id of the processor
// (P) it runs on. Goroutines running at the same moment are on different Ps,
// so they start on different shards and write different cache lines; the
// goroutine may migrate right after, which costs only locality, never
// correctness.
//
// runtime.procPin is not API, but the runtime keeps it reachable through a
// linkname directive for the packages that rely on it. It is the only one in
// this module; it is isolated here and the admit_purego build tag swaps in
// home_purego.go. BenchmarkHome in home_bench_test.go measures the choices.
func home() uint {
	p := procPin()
	procUnpin()
	return uint(p)
}

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// homeIsProcessor reports that home names the caller's processor, so that
// consecutive calls from one core start at one shard (standing aside, in
// central.go, relies on it).
const homeIsProcessor = true
