package keyed_test

import (
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/internal/tsc"
	"github.com/admit-go/admit/keyed"
)

// TestClockSource: a limiter on the system clock reads it through the
// timestamp counter exactly where internal/tsc supports that, and one
// given another clock (admit.WithClock) reads that clock and nothing
// else.
func TestClockSource(t *testing.T) {
	l, err := keyed.New(10, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.Counter(), tsc.Enable(); got != want {
		t.Fatalf("system clock through the counter: %v, want %v (what internal/tsc supports here)", got, want)
	}
	l, err = keyed.New(10, 1, admit.WithClock(admit.SystemClock()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.Counter(), tsc.Enable(); got != want {
		t.Fatalf("admit.WithClock(admit.SystemClock()): through the counter %v, want %v", got, want)
	}
	l, err = keyed.New(10, 1, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	if l.Counter() {
		t.Fatal("a limiter given a fake clock reads the counter")
	}
}
