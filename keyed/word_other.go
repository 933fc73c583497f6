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
