package redisbucket

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// Every request's slot ends within the last sixteenth of a timeout before
// the request's own deadline, never after it, whatever order the requests'
// clock readings arrive in; requests close together share a slot.
func TestDeadlineSlots(t *testing.T) {
	const timeout = 16 * time.Hour // the slots' timers never fire during the test
	ds := deadlines{timeout: timeout}
	rng := rand.New(rand.NewPCG(1, 2))
	slots := map[*slot]bool{}
	now := int64(0)
	for i := range 10_000 {
		// Readings mostly advance, sometimes arrive late (a goroutine that
		// read the clock and was descheduled).
		now += rng.Int64N(int64(time.Minute))
		read := now - rng.Int64N(int64(10*time.Minute))*int64(rng.IntN(8)/7)
		s := ds.get(read)
		end := read + int64(timeout)
		if s.at > end || s.at < end-int64(timeout/16) {
			t.Fatalf("request %d at %v: its slot ends at %v, outside [%v, %v]", i, time.Duration(read), time.Duration(s.at), time.Duration(end-int64(timeout/16)), time.Duration(end))
		}
		slots[s] = true
	}
	// A slot lasts a sixteenth of a timeout (an hour here) of readings a
	// minute apart on average, with some out of order: far fewer slots than
	// requests.
	if len(slots) > 10_000/10 {
		t.Errorf("%d slots for 10000 requests", len(slots))
	}
}

// A slot's Done closes at its end, not before; a request's context reports
// its exact deadline, no error until Done closes, then DeadlineExceeded,
// and its caller's values.
func TestCallContext(t *testing.T) {
	ds := deadlines{timeout: 50 * time.Millisecond}
	now := int64(time.Since(mono))
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	c := &callCtx{Context: parent, deadline: mono.Add(time.Duration(now) + ds.timeout), s: ds.get(now)}
	if dl, ok := c.Deadline(); !ok || !dl.Equal(mono.Add(time.Duration(now)+ds.timeout)) {
		t.Errorf("Deadline = %v, %v", dl, ok)
	}
	if c.Value(key{}) != "v" {
		t.Errorf("Value = %v", c.Value(key{}))
	}
	cancel() // the caller's cancellation does not end the request
	if err := c.Err(); err != nil {
		t.Errorf("Err before the deadline = %v", err)
	}
	select {
	case <-c.Done():
		if at := int64(time.Since(mono)); at < c.s.at {
			t.Errorf("Done closed at %v, before the slot's end %v", time.Duration(at), time.Duration(c.s.at))
		}
	case <-time.After(time.Minute):
		t.Fatal("Done never closed")
	}
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Errorf("Err after the deadline = %v", err)
	}
}
