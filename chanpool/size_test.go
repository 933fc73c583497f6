package chanpool

import (
	"testing"
	"unsafe"
)

// TestSlotSize holds New's documented cost per slot on 64-bit platforms: a
// slot of 120 bytes for a T of one word (its gen word padded apart from the
// next slot's), besides the channel's 8-byte entry.
func TestSlotSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the documented size is for 64-bit platforms")
	}
	if got := unsafe.Sizeof(slot[*int]{}); got != 120 {
		t.Fatalf("a slot is %d bytes; New's doc says 120", got)
	}
}
