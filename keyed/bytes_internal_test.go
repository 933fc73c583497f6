package keyed

import (
	"testing"
	"unsafe"
)

// TestSizes: the sizes the documented bytes bounds are made of
// (maxBytesPerKey, maxBytesPerMultiKey, maxBytesPerShard) are the types'.
func TestSizes(t *testing.T) {
	for _, c := range []struct {
		what      string
		got, want uintptr
	}{
		{"entry", unsafe.Sizeof(entry{}), 32},
		{"multiEntry and the longest key form (the 240-byte class)", unsafe.Sizeof(multiEntry{}) + maxKeyBytes, 232},
		{"a key's array of MaxNames states", MaxNames * unsafe.Sizeof(limState{}), 2048},
		{"limParams (the 80-byte class)", unsafe.Sizeof(limParams{}), 72},
		{"shard", unsafe.Sizeof(shard{}), 128},
		{"view", unsafe.Sizeof(view{}), 32},
		{"table (the 64-byte class)", unsafe.Sizeof(table{}), 56},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d bytes, the bounds assume %d", c.what, c.got, c.want)
		}
	}
}
