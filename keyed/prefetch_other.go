//go:build !amd64 || admit_purego

package keyed

import "unsafe"

// prefetchw does nothing here: see prefetch_amd64.go.
func prefetchw(unsafe.Pointer) {}
