//go:build amd64 || arm64

package keyed

import "unsafe"

// word returns the 8 bytes at p+i as one word, by one load: these
// architectures allow it unaligned. (Only equality is asked of it, so the
// byte order does not matter.)
func word(p *byte, i int) uint64 {
	return *(*uint64)(unsafe.Add(unsafe.Pointer(p), i))
}

// word32 is word for 4 bytes.
func word32(p *byte, i int) uint32 {
	return *(*uint32)(unsafe.Add(unsafe.Pointer(p), i))
}
