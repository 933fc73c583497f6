package bench

import (
	"testing"
	"time"
	_ "unsafe" // for go:linkname
)

// nanotime is the runtime's monotonic clock, the read under time.Since. It
// is reached through a linkname only here, to measure whether calling it
// directly would pay (the core module reads the clock through time.Since).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

var clockStart = time.Now()

// BenchmarkClock measures the ways to read the clock that a limiter could
// use: time.Since on a fixed start (what every bucket here does),
// runtime.nanotime directly, and time.Now (what x/time/rate does, reading
// the wall clock too).
func BenchmarkClock(b *testing.B) {
	var sink int64
	b.Run("impl=time.Since", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink += int64(time.Since(clockStart))
		}
	})
	b.Run("impl=runtime.nanotime", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink += nanotime()
		}
	})
	b.Run("impl=time.Now", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink += time.Now().UnixNano()
		}
	})
	_ = sink
}
