//go:build admit_purego

package tsc

import "time"

// start is the origin of the monotonic readings: time.Since on a Time
// with a monotonic reading reads the monotonic clock only.
var start = time.Now()

// monotonic is mono.go's reading through time.Since: the same clock, a few
// instructions more.
func monotonic() int64 { return int64(time.Since(start)) }
