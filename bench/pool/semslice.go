// Package pool holds SemSlice, the bounded resource pool that the pool
// benchmarks use as their teaching baseline: a golang.org/x/sync/semaphore
// gate in front of a mutex-guarded slice of idle resources. It is the
// design most Go code reaches for first, and the one chanpool's single
// channel replaces.
//
// The semaphore bounds how many resources are out; the slice holds the
// idle ones. They are two structures that must be kept in step by hand, and
// the one ordering rule that keeps them in step is in Release: put the
// resource back in the slice first, then free the permit. Freed first, the
// permit lets another caller in while the slice is still empty; it creates a
// new resource, the old one lands in the slice a moment later, and the pool
// now owns more resources than its bound (TestReleaseOrderMatters shows it
// step by step).
package pool

import (
	"context"
	"sync"

	"golang.org/x/sync/semaphore"
)

// SemSlice is a bounded pool of resources of type T. It is safe for
// concurrent use. The zero value is not usable; create one with
// NewSemSlice. A SemSlice must not be copied after first use.
//
// It is deliberately minimal: no validation, no expiry, no protection
// against a resource released twice, LIFO reuse of idle resources.
type SemSlice[T any] struct {
	sem     *semaphore.Weighted // one permit per resource out or being created
	create  func(context.Context) (T, error)
	destroy func(T)

	mu   sync.Mutex
	idle []T // idle resources, most recently released last; requires mu
}

// NewSemSlice returns a pool that creates at most capacity resources with
// create, lazily, and closes them with destroy (which may be nil).
func NewSemSlice[T any](capacity int, create func(context.Context) (T, error), destroy func(T)) *SemSlice[T] {
	return &SemSlice[T]{
		sem:     semaphore.NewWeighted(int64(capacity)),
		create:  create,
		destroy: destroy,
		idle:    make([]T, 0, capacity), // append in Release never grows it
	}
}

// Acquire waits for a permit, then takes the most recently released idle
// resource, or creates one if there is none. It returns ctx.Err() if ctx
// ends while it waits, and create's error if create fails; in both cases it
// holds no permit.
func (p *SemSlice[T]) Acquire(ctx context.Context) (T, error) {
	var zero T
	if err := p.sem.Acquire(ctx, 1); err != nil {
		return zero, err
	}
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		v := p.idle[n-1]
		p.idle[n-1] = zero
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return v, nil
	}
	p.mu.Unlock()
	v, err := p.create(ctx)
	if err != nil {
		p.sem.Release(1)
		return zero, err
	}
	return v, nil
}

// Release returns v to the pool. v must have come from Acquire and must not
// be used afterwards.
func (p *SemSlice[T]) Release(v T) {
	p.mu.Lock()
	p.idle = append(p.idle, v)
	p.mu.Unlock()
	// Only now may another caller be let in: it will find v in the slice.
	// Releasing the permit before the append would let it find the slice
	// empty and create a resource beyond the bound.
	p.sem.Release(1)
}

// Destroy closes v instead of returning it, and frees its permit.
func (p *SemSlice[T]) Destroy(v T) {
	if p.destroy != nil {
		p.destroy(v)
	}
	p.sem.Release(1)
}

// Close destroys the idle resources. It does not wait for resources still
// out: release everything before calling it, since a resource released
// afterwards is never destroyed. The pool must not be used afterwards. (A
// panicking create also leaks a permit: the baseline stays minimal on
// purpose; chanpool handles both.)
func (p *SemSlice[T]) Close() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	if p.destroy != nil {
		for _, v := range idle {
			p.destroy(v)
		}
	}
}
