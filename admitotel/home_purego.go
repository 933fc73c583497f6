//go:build admit_purego

package admitotel

import "math/rand/v2"

// pin returns a random number from the runtime's per-thread generator,
// which addSlow reduces to a slot: no linkname, but no exclusive writer
// either, so this build always adds atomically (plainAdds is false). See
// home.go.
func pin() uint { return uint(rand.Uint64()) }

func unpin() {}
