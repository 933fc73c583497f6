//go:build !amd64 || admit_purego

package keyed

// prefetch does nothing here: see prefetch_amd64.go.
func prefetch(uintptr) {}
