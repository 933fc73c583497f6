//go:build !amd64 || admit_purego

package keyed

import "unsafe"

// prefetch does nothing here: see prefetch_amd64.go.
func prefetch(unsafe.Pointer) {}
