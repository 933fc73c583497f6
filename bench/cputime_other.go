//go:build !linux

package bench

import "time"

// threadCPU and processCPU are not measured off Linux.
func threadCPU() (time.Duration, bool)  { return 0, false }
func processCPU() (time.Duration, bool) { return 0, false }
