package buckettest

import (
	"runtime"
	"testing"
	"time"
)

// HangAfter is the limit the suite's storms give Watchdog: every call in
// them returns within microseconds of its deadline, so only a deadlock
// comes near it.
const HangAfter = 30 * time.Second

// Watchdog calls wait on a new goroutine and returns once it has returned.
// If it has not within limit, Watchdog fails t at once with every
// goroutine's stack, so that a deadlock is reported with its cause instead
// of hanging the test binary until its timeout; the stuck goroutine is left
// behind. limit guards against a hang and is not a timing assertion: make
// it many times longer than wait can take on a loaded machine. Call
// Watchdog from the test's goroutine.
func Watchdog(t testing.TB, limit time.Duration, what string, wait func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait()
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("hang: waited %v for %s; goroutines:\n%s", limit, what, buf)
	}
}
