package adaptive

// A reading that races a clock's step back, on a clock that holds one
// caller between its reading and the mutex. (The simulator's clock tests
// are in clock_sim_test.go.)

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// holdClock is a fake clock whose next reading, once armed, blocks after it
// is read and before it is returned: a caller that read the clock and was
// descheduled before it took the mutex.
type holdClock struct {
	t     atomic.Int64
	mu    sync.Mutex
	armed bool
	held  chan struct{} // closed when the armed reading is taken
	gate  chan struct{} // the armed reading returns once this is closed
}

func (c *holdClock) Now() int64 {
	v := c.t.Load()
	c.mu.Lock()
	armed := c.armed
	c.armed = false
	c.mu.Unlock()
	if armed {
		close(c.held)
		<-c.gate
	}
	return v
}

func (c *holdClock) Sleep(ctx context.Context, d time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestLateReadingAcrossStepBack: a reading taken just before the
// clock stepped back an hour, applied just after another caller applied a
// reading from after the step, gets the new skew added although it needs
// none: the limiter's time jumps an hour forward, and the next reading
// (an hour "behind" that) adds another hour of skew. A permit that ran
// 10 ms is recorded with a latency of an hour.
func TestLateReadingAcrossStepBack(t *testing.T) {
	const T = int64(1000 * time.Second)
	clk := &holdClock{held: make(chan struct{}), gate: make(chan struct{})}
	clk.t.Store(T)
	l, err := New(WithClock(clk), WithInitialLimit(10))
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	p1, err := l.Acquire(bg)
	if err != nil {
		t.Fatal(err)
	}
	clk.mu.Lock()
	clk.armed = true
	clk.mu.Unlock()
	late := make(chan *Permit, 1)
	go func() {
		p, err := l.Acquire(bg) // reads T, then is held
		if err != nil {
			t.Error(err)
		}
		late <- p
	}()
	<-clk.held
	clk.t.Add(-int64(time.Hour)) // the clock steps back an hour
	p2, err := l.Acquire(bg)     // applies T - 1h: skew = 1h
	if err != nil {
		t.Fatal(err)
	}
	close(clk.gate)
	p3 := <-late // applies T (+ skew)
	clk.t.Add(int64(10 * time.Millisecond))
	p1.Success()
	p2.Success()
	p3.Success()
	l.mu.Lock()
	last, skew := l.last, l.skew
	l.mu.Unlock()
	t.Logf("limiter time %v after T (10ms of clock passed), skew %v", time.Duration(last-T), time.Duration(skew))
	if last-T > int64(time.Second) {
		t.Errorf("the limiter's time moved %v for 10 ms of the clock: a reading from before the step got the step's skew", time.Duration(last-T))
	}
}
