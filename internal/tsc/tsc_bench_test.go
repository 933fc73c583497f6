package tsc

import (
	"testing"
	"time"
)

// BenchmarkNow compares a reading through the counter with the monotonic
// clock's own, read directly (monotonic: mono.go) and through time.Since,
// on this machine's hardware.
func BenchmarkNow(b *testing.B) {
	var sink int64
	since := time.Now()
	b.Run("impl=since", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink += int64(time.Since(since))
		}
	})
	b.Run("impl=monotonic", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink += monotonic()
		}
	})
	b.Run("impl=counter", func(b *testing.B) {
		if !Enable() {
			b.Skip("the counter cannot stand in for the monotonic clock here")
		}
		b.ReportAllocs()
		for b.Loop() {
			sink += Now()
		}
	})
	b.Run("impl=rdtsc", func(b *testing.B) {
		if !Enable() {
			b.Skip("no counter here")
		}
		b.ReportAllocs()
		for b.Loop() {
			sink += int64(rdtsc())
		}
	})
	_ = sink
}
