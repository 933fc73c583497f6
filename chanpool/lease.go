package chanpool

import "sync/atomic"

// Destruction reasons, indexes into counters.destroyed.
const (
	reasonValidation = iota
	reasonIdle
	reasonLifetime
	reasonClosed
	reasonCaller
	numReasons
)

// slot is one permit of the pool together with the resource it may hold.
//
// Ownership: the plain fields below gen belong to whoever holds the slot,
// that is, the goroutine that received it from Pool.ch (or took it from the
// unborn count) until it sends it back or retires it, and the holder of the
// lease whose generation matches gen. The channel send and receive order
// every write by one holder before every read by the next.
type slot[T any] struct {
	p *Pool[T] // immutable

	// gen counts hand-outs and returns: odd while a lease is out, even
	// otherwise. A lease carries the odd value it was issued with; Release
	// and Destroy move gen from that value to the next with a CAS, so of
	// all copies of a lease, and of all stale leases for this slot, exactly
	// one call ever succeeds. gen only grows and is 64 bits, so a stale
	// lease's value never comes back.
	gen atomic.Uint64

	value    T
	live     bool  // value holds a resource that has not been destroyed
	lastUsed int64 // clock reading at creation or last Release, if stamped
	expires  int64 // clock reading at which the lifetime ends, if limited
	// handed is set by put when it counted a waiter out for this slot
	// (serveWaiter) and cleared by the slot's receiver; the channel hands
	// the slot, and the write, from one to the other.
	handed bool

	// Keeps two slots' gen words out of one cache line, so that leases on
	// different slots do not contend.
	_ [64]byte
}

// Pool is a bounded pool of resources of type T. It is safe for concurrent
// use. The zero value is not usable; create one with New. A Pool must not be

// Lease is the right to use one resource until Release or Destroy. It is a
// small value (a slot pointer and a generation) and costs no allocation.
// Copies of a lease refer to the same right: the first Release or Destroy
// through any copy ends it, and any later call through any copy panics.
// The zero Lease is not a lease; its methods panic. A Lease may be passed
// between goroutines, but its methods must not be called concurrently with
// each other.
type Lease[T any] struct {
	s   *slot[T]
	gen uint64
}

// Value returns the leased resource. It panics if the lease has ended.
func (l Lease[T]) Value() T {
	if l.s == nil || l.s.gen.Load() != l.gen {
		l.misuse("Value")
	}
	return l.s.value
}

// Release returns the resource to the pool, for the next waiting caller if
// there is one, or destroys it if the pool is closed. It panics, changing
// nothing, if the lease has already ended: released or destroyed twice, or
// through a stale copy whose slot has since been leased to someone else.
func (l Lease[T]) Release() {
	s := l.s
	if s == nil || !s.gen.CompareAndSwap(l.gen, l.gen+1) {
		l.misuse("Release")
	}
	// The CAS made this goroutine the slot's holder again.
	p := s.p
	if p.stamp {
		s.lastUsed = p.cfg.clock.Now()
	}
	p.put(s)
}

// Destroy destroys the resource instead of returning it, for one the caller
// found broken, and frees its slot: the next caller to get the slot creates
// a new resource. It panics, changing nothing, if the lease has already
// ended.
func (l Lease[T]) Destroy() {
	s := l.s
	if s == nil || !s.gen.CompareAndSwap(l.gen, l.gen+1) {
		l.misuse("Destroy")
	}
	p := s.p
	p.destroyValue(s, reasonCaller, p.put)
	p.put(s)
}

func (l Lease[T]) misuse(method string) {
	if l.s == nil {
		panic("chanpool: " + method + " called on the zero Lease")
	}
	if cur := l.s.gen.Load(); cur == l.gen+1 {
		panic("chanpool: " + method + " called on a Lease that was already released or destroyed")
	}
	panic("chanpool: " + method + " called on a stale Lease: it was released and its slot has since been leased again")
}
