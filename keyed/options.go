package keyed

import (
	"fmt"

	"github.com/admit-go/admit"
)

// Policy is what a Limiter does when a new key arrives and its shard's share
// of the key bound is held by live buckets. See the package doc for what
// each costs.
type Policy int

const (
	// EvictLRU forgets the least recently used live key to make room; its
	// client then sees a fresh, full bucket. The default.
	EvictLRU Policy = iota
	// RefuseNew refuses the new key (Allowed false, an error wrapping
	// admit.ErrUnavailable) and keeps every live bucket.
	RefuseNew
)

// String returns the policy's name.
func (p Policy) String() string {
	switch p {
	case EvictLRU:
		return "EvictLRU"
	case RefuseNew:
		return "RefuseNew"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// WithMaxKeys bounds the number of keys held at n >= 1 (default
// DefaultMaxKeys). The bound is split evenly over the shards; see the
// package doc.
func WithMaxKeys(n int) admit.Option {
	return func(c *admit.Config) {
		if n < 1 {
			c.Fail(fmt.Errorf("%w: WithMaxKeys(%d): want at least 1", admit.ErrInvalidConfig, n))
			return
		}
		c.MaxKeys = n
	}
}

// WithPolicy sets what happens when a new key finds no room (default
// EvictLRU).
func WithPolicy(p Policy) admit.Option {
	return func(c *admit.Config) {
		if p != EvictLRU && p != RefuseNew {
			c.Fail(fmt.Errorf("%w: WithPolicy(%v): want EvictLRU or RefuseNew", admit.ErrInvalidConfig, p))
			return
		}
		c.KeyPolicy = int(p)
	}
}

// WithShards sets the number of shards, each a mutex over its share of the
// keys: a power of two, at most 65536 and at most the key bound. Without
// it, New uses 256, lowered until each shard's share of the bound is at
// least 64 keys. More shards mean less lock contention between cores and a
// bound split into smaller shares.
func WithShards(n int) admit.Option {
	return func(c *admit.Config) {
		if n < 1 || n > maxShards || n&(n-1) != 0 {
			c.Fail(fmt.Errorf("%w: WithShards(%d): want a power of two in [1, %d]", admit.ErrInvalidConfig, n, maxShards))
			return
		}
		c.Shards = n
	}
}
