//go:build race || admit_purego || !(amd64 || arm64 || ppc64 || ppc64le || riscv64 || s390x || loong64 || mips64 || mips64le)

package admitotel

// plainAdds is false: every add is atomic. See plain.go.
const plainAdds = false
