// Package memstore implements the in-process store of admit-rls: a token
// bucket per descriptor key, deciding a request's descriptors all or
// nothing.
//
// # Buckets
//
// Every key is a bucket with the exact integer arithmetic of package
// rls/internal/tick, the same as the Redis store's: requests_per_unit per
// unit is a ratio of integers, time counts in ticks of a power of ten of
// nanoseconds, and refill never drifts, so 7 a minute delivers its 7th
// token at 60 s and rules above 1e9 a second (hits that count bytes) are
// exact too. A bucket is created full, refilled lazily, and admits never
// more than capacity + rate × T over any span T. A full bucket is
// indistinguishable from an absent one, so a bucket found full after a
// decision is dropped.
//
// A changed limit applies at the first request that brings it, whatever
// that request's outcome: the balance, its fraction included, carries over
// to the new limit (clamped to the new capacity, never below what it was),
// and refills at the new rate from that instant. So a client drained under
// a low limit and raised by a reload is admitted as soon as the new rate
// has made a token, and lowering a limit never gives tokens back. A
// balance below zero (charged by a debt hit) stays owed under the new
// limit, whether or not it charges, down to minus its burst: no change of
// limit forgives counted usage beyond the new limit's own bound. A full
// bucket, like an absent one, is full under the new limit.
//
// # All or nothing
//
// Keys live in 64 shards, each a mutex around a map. A request locks the
// shards of all its keys in ascending shard order (so two requests never
// wait on each other in a cycle), reads the clock once, and works on
// copies of its buckets: carried over, refilled, then each hit checked and
// tentatively taken in order. Only then does it write them back: with
// every take if every enforced hit held its cost, otherwise with the
// carry-over, the refill and the debt hits' charges only (a rule with
// debt: true is charged whatever the outcome, down to minus one burst).
// No other request sees the copies, so the decision is linearizable at the
// instant of the clock reading, across all its keys. A hit of capacity 0
// (requests_per_unit: 0) has no bucket and refuses any cost but 0, in the
// same step.
//
// # Memory
//
// A bucket is named by a 128-bit digest of its key (two maphash values
// under seeds drawn per process), not by the key: a client that sends
// descriptor values of 60 KiB costs what one of 6 bytes does. So memory is
// bounded in bytes: at most the key bound (WithMaxKeys) of buckets, each at
// most BucketBytes (128 bytes, measured as about 107: map slot and state),
// split evenly over the shards (a shard whose first buckets in a scan all
// belong to the request inserting one may pass its share by that request's
// buckets, at most rls.MaxLimited; at the default bound a shard holds
// 16,384). A new key arriving at a full shard first
// drops full buckets found in a short scan; if none is full it evicts one
// bucket that the request does not use, and that bucket's client then sees
// a fresh, full bucket: up to one extra burst, once per eviction (counted by
// Evictions). With the bound above the number of keys active within one
// refill period there are none. The limits requests bring (overrides) are
// computed into bucket arithmetic through a memo of 256 entries, so they
// cannot grow the process either.
package memstore
