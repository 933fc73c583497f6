//go:build !race && !admit_purego && (amd64 || arm64 || ppc64 || ppc64le || riscv64 || s390x || loong64 || mips64 || mips64le)

package admitotel

// plainAdds is true where a pinned writer may add to its own slot with a
// plain read-modify-write: the P is its only writer (see pin), and a 64-bit
// platform loads and stores an aligned word whole, so the collection
// callback's atomic loads see either the old or the new count, never a torn
// one (the Go memory model's rule for racy word-sized accesses). Under the
// race detector, on 32-bit platforms and in the purego build every add is
// atomic instead (plain_atomic.go), at about 4 ns more per call. make test
// runs admitotel's tests with and without -race, so both are tested.
const plainAdds = true
