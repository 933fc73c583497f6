package keyed_test

import (
	"testing"
	"time"

	"github.com/admit-go/admit/keyed"
)

func TestFillTime(t *testing.T) {
	for _, c := range []struct {
		capacity int64
		rate     float64
		want     time.Duration
	}{
		{10, 1, 10 * time.Second},
		{4, 2, 2 * time.Second},
		{1, 1e9, time.Nanosecond},
		{100, 0.5, 200 * time.Second},
		{3, 1e-6, 3e6 * time.Second},
		{5, 0, 0},
	} {
		l, err := keyed.New(c.capacity, c.rate)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.FillTime(); got != c.want {
			t.Errorf("New(%d, %g).FillTime() = %v, want %v", c.capacity, c.rate, got, c.want)
		}
	}
	// A third of a token per second: 10 tokens take 30 s, read as the
	// decimal 0.3333333333333333, a hair over 30 s, never under.
	l, _ := keyed.New(10, 1.0/3)
	if got := l.FillTime(); got < 30*time.Second || got > 30*time.Second+time.Microsecond {
		t.Errorf("New(10, 1/3).FillTime() = %v, want 30 s up to rounding", got)
	}
}
