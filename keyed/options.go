package keyed

import (
	"fmt"

	"github.com/admit-go/admit"
)

// Policy is what a Limiter does when a new key arrives and the key bound is
// held by live buckets (full ones are dropped first). See the package doc
// for what each costs.
type Policy int

const (
	// EvictLRU forgets a live key not used since the CLOCK hand last
	// passed it (an approximation of the least recently used one) to make
	// room; its client then sees a fresh, full bucket. The default.
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
// DefaultMaxKeys), exactly: eviction or refusal starts when the limiter
// holds n keys, whatever the shard count. Keys are counted, not limits.
//
// In bytes: a held single-limit key costs one allocation of at most 96
// bytes (its entry and its key, or a 16-byte digest of a key longer than
// 64 bytes, whatever the caller sends), and its share of the tables, about
// 12 to 18 bytes (9 bytes a slot at a load between 1/2 and 3/4; they keep
// their peak size): 120 bytes at most, 61.6 measured at 2^20 keys of 16
// bytes. Each shard costs 296 bytes at most besides (see WithShards), so
// the heap stays within 120·n + 296·shards bytes of single-limit keys. A
// multi-limit key costs at most 15 856 bytes instead (240 for its entry
// and key, up to MaxNames Names of up to 208 bytes each, which keys with
// the same limits share, and a 2.25 KB array past 3 Names): see Cost in
// the package doc.
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

// WithShards sets the number of shards the keys are spread over, each a
// table read without a lock and a mutex taken to insert or remove keys: a
// power of two, at most 65536 and at most the key bound. Without it, New
// uses 256, lowered until the shards hold at least 64 keys each on average
// at the bound. More shards mean less contention between insertions on
// different cores and smaller sweeps, and more memory: each shard costs
// 160 bytes from New on and its first table (136 bytes) once it holds a
// key, however few keys share it, which the bound in bytes adds to the
// keys' (see WithMaxKeys): WithShards(65536) alone is 10.5 MB.
func WithShards(n int) admit.Option {
	return func(c *admit.Config) {
		if n < 1 || n > maxShards || n&(n-1) != 0 {
			c.Fail(fmt.Errorf("%w: WithShards(%d): want a power of two in [1, %d]", admit.ErrInvalidConfig, n, maxShards))
			return
		}
		c.Shards = n
	}
}
