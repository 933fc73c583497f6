//go:build !amd64 && !arm64

package keyed

import (
	"encoding/binary"
	"unsafe"
)

// word returns the 8 bytes at p+i as one word, byte by byte where the
// architecture may not load a word unaligned.
func word(p *byte, i int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(p), i)), 8))
}

// word32 is word for 4 bytes.
func word32(p *byte, i int) uint32 {
	return binary.LittleEndian.Uint32(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(p), i)), 4))
}
