package ratelimit

import (
	"slices"
	"sync/atomic"

	"github.com/admit-go/admit"
)

// Cache holds the rendered Sets of the last 8 distinct lists a middleware's
// WithLimits function returned, so that a handful of tiers cost no
// rendering per request. Each slot is replaced whole, never written into,
// so a reader sees a complete Set or none. The zero value is an empty
// cache, safe for concurrent use; a Cache must not be copied after first
// use.
type Cache struct {
	slots [8]atomic.Pointer[Set]
	next  atomic.Uint32 // the slot the next miss replaces, modulo 8
}

// Get returns limits' rendered Set, building and caching it on a miss (an
// allocation per miss: a workload of more distinct lists than slots pays
// it on every request, and stays correct). Errors are NewSet's.
func (c *Cache) Get(limits []admit.Limit, unnamed string) (*Set, error) {
	for i := range c.slots {
		if p := c.slots[i].Load(); p != nil && slices.Equal(p.Limits, limits) {
			return p, nil
		}
	}
	// The Set keeps a private copy: the caller may reuse its slice, and
	// every lookup compares against the copy.
	p, err := NewSet(slices.Clone(limits), unnamed)
	if err != nil {
		return nil, err
	}
	c.slots[c.next.Add(1)%uint32(len(c.slots))].Store(p)
	return p, nil
}
