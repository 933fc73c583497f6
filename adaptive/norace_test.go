//go:build !race

package adaptive

// raceEnabled reports whether the race detector is on: see simulated.
const raceEnabled = false
