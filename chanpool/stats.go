package chanpool

import (
	"sync/atomic"
	"time"
)

type counters struct {
	waits, waitNanos atomic.Int64
	cancelled        atomic.Uint64
	saturated        atomic.Uint64
	created          atomic.Uint64
	createErrors     atomic.Uint64
	destroyed        [numReasons]atomic.Uint64
}

// Stats is a snapshot of a pool's state and cumulative counters. The counts
// are read one after another while the pool keeps running, so they need not
// be mutually consistent at any single instant.
type Stats struct {
	Capacity int // the bound given to New
	Idle     int // resources in the pool, not leased
	InUse    int // leases outstanding
	Creating int // create calls in progress
	Waiting  int // Acquire calls blocked on an exhausted pool now

	Acquires          uint64        // leases handed out by Acquire and TryAcquire
	Waits             uint64        // Acquire calls that found the pool exhausted and waited
	WaitTime          time.Duration // total time those calls waited, by the pool's clock
	CancelledAcquires uint64        // Acquire calls that returned ctx.Err()
	SaturatedAcquires uint64        // Acquire calls refused with ErrSaturated

	Created      uint64 // successful create calls
	CreateErrors uint64 // failed create calls, panics included

	DestroyedValidation uint64 // resources that failed validation
	DestroyedIdle       uint64 // resources idle for WithMaxIdleTime or longer
	DestroyedLifetime   uint64 // resources past WithMaxLifetime
	DestroyedClosed     uint64 // resources destroyed by Close or released after it
	DestroyedCaller     uint64 // resources destroyed through Lease.Destroy
}

// Destroyed returns the number of resources destroyed for any reason.
func (s Stats) Destroyed() uint64 {
	return s.DestroyedValidation + s.DestroyedIdle + s.DestroyedLifetime + s.DestroyedClosed + s.DestroyedCaller
}

// Stats returns a snapshot of the pool's state and counters. It takes time
// proportional to the capacity and never blocks the pool.
func (p *Pool[T]) Stats() Stats {
	var inUse int
	var acquires uint64
	for i := range p.slots {
		g := p.slots[i].gen.Load()
		inUse += int(g & 1)
		acquires += (g + 1) / 2 // one hand-out per odd value reached
	}
	c := &p.counters
	st := Stats{
		Capacity:            int(p.capacity),
		InUse:               inUse,
		Creating:            int(p.creating.Load()),
		Waiting:             int(max(0, p.waiting.Load())),
		Acquires:            acquires,
		Waits:               uint64(c.waits.Load()),
		WaitTime:            time.Duration(c.waitNanos.Load()),
		CancelledAcquires:   c.cancelled.Load(),
		SaturatedAcquires:   c.saturated.Load(),
		Created:             c.created.Load(),
		CreateErrors:        c.createErrors.Load(),
		DestroyedValidation: c.destroyed[reasonValidation].Load(),
		DestroyedIdle:       c.destroyed[reasonIdle].Load(),
		DestroyedLifetime:   c.destroyed[reasonLifetime].Load(),
		DestroyedClosed:     c.destroyed[reasonClosed].Load(),
		DestroyedCaller:     c.destroyed[reasonCaller].Load(),
	}
	st.Idle = max(0, int(p.alive.Load())-inUse)
	return st
}
