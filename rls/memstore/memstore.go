// Package memstore implements the in-process store of admit-rls: a token
// bucket per descriptor key, deciding a request's descriptors all or
// nothing.
//
// # Buckets
//
// Every key is a bucket with the integer arithmetic of the core module's
// refill package (units of 2^-k tokens, no drift), the same as mutexbucket
// and keyed: created full, refilled lazily, never more than
// capacity + rate × T over any span T. A full bucket is indistinguishable
// from an absent one, so a bucket found full after a decision is dropped.
//
// # All or nothing
//
// Keys live in 64 shards, each a mutex around a map. A request locks the
// shards of all its keys in ascending shard order (so two requests never
// wait on each other in a cycle), reads the clock once, and then, key by
// key, refills, checks and tentatively takes its cost, saving each bucket's
// previous state. If a hit that is not in shadow mode lacks its tokens, the
// saved states are put back in reverse order before any lock is released,
// so no other request ever sees a refused request's tentative takes: the
// decision is linearizable at the instant of the clock reading, across all
// its keys.
//
// # Memory
//
// The store holds at most its key bound (WithMaxKeys) of buckets, split
// evenly over the shards. A new key arriving at a full shard first drops
// full buckets found in a short scan; if none is full it evicts one bucket
// that the request does not use, and that bucket's client then sees a fresh,
// full bucket: up to one extra burst, once per eviction (counted by
// Evictions). With the bound above the number of keys active within one
// refill period there are none.
package memstore
