//go:build admit_purego

package shardedbucket

import "math/rand/v2"

// home returns a random shard hint from the runtime's per-thread generator:
// no linkname and no shared write, but consecutive calls from one core land
// on different shards, so under parallel load cache lines move between cores
// more often than with the default build. See home.go.
func home() uint { return uint(rand.Uint64()) }

// homeIsProcessor reports that home does not name the caller's processor:
// a home here is no core's, and standing aside (central.go) is off.
const homeIsProcessor = false
