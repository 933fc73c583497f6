package pool

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

type counter struct {
	alive, peak, made atomic.Int64
}

func (c *counter) create(context.Context) (*int64, error) {
	id := c.made.Add(1)
	n := c.alive.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	return &id, nil
}

func (c *counter) destroy(*int64) { c.alive.Add(-1) }

func TestReusesIdleResources(t *testing.T) {
	c := &counter{}
	p := NewSemSlice(2, c.create, c.destroy)
	for range 10 {
		v, err := p.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p.Release(v)
	}
	if got := c.made.Load(); got != 1 {
		t.Fatalf("made %d resources for sequential use, want 1", got)
	}
	p.Close()
	if got := c.alive.Load(); got != 0 {
		t.Fatalf("%d resources alive after Close, want 0", got)
	}
}

func TestAcquireHonoursContext(t *testing.T) {
	c := &counter{}
	p := NewSemSlice(1, c.create, c.destroy)
	v, _ := p.Acquire(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Acquire(ctx); err != context.Canceled {
		t.Fatalf("Acquire on a full pool with an ended ctx: %v, want context.Canceled", err)
	}
	p.Release(v)
	p.Close()
}

// TestBoundUnderContention checks that goroutines hammering a small pool
// never have more than capacity resources alive at once.
func TestBoundUnderContention(t *testing.T) {
	const capacity = 3
	c := &counter{}
	p := NewSemSlice(capacity, c.create, c.destroy)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 500 {
				v, err := p.Acquire(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if (g+i)%7 == 0 {
					p.Destroy(v)
				} else {
					p.Release(v)
				}
			}
		})
	}
	wg.Wait()
	p.Close()
	if peak := c.peak.Load(); peak > capacity {
		t.Fatalf("%d resources alive at once, capacity %d", peak, capacity)
	}
	if got := c.alive.Load(); got != 0 {
		t.Fatalf("%d resources alive after Close, want 0", got)
	}
}

// TestReleaseOrderMatters plays, one step at a time, a release that frees
// the permit before returning the resource to the slice, and shows the
// bound broken; then the same steps with Release, which cannot break it.
func TestReleaseOrderMatters(t *testing.T) {
	ctx := context.Background()
	c := &counter{}
	p := NewSemSlice(1, c.create, c.destroy)
	v1, _ := p.Acquire(ctx)

	// Wrong order, step 1: free the permit, slice still empty.
	p.sem.Release(1)
	// Another caller gets in, finds no idle resource, creates one.
	v2, _ := p.Acquire(ctx)
	// Step 2: the first resource lands in the slice.
	p.mu.Lock()
	p.idle = append(p.idle, v1)
	p.mu.Unlock()
	if got := c.alive.Load(); got != 2 {
		t.Fatalf("wrong order: %d resources alive, want 2 (the bound of 1 broken)", got)
	}
	p.Release(v2)
	p.Close()

	// Right order: once the permit is free, the resource is already idle.
	c = &counter{}
	p = NewSemSlice(1, c.create, c.destroy)
	v1, _ = p.Acquire(ctx)
	p.Release(v1)
	v2, _ = p.Acquire(ctx)
	if v2 != v1 || c.alive.Load() != 1 {
		t.Fatalf("right order: got a new resource (%d alive), want the released one", c.alive.Load())
	}
	p.Release(v2)
	p.Close()
}
