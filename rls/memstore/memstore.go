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
// Keys live in 64 shards, each a mutex around a table. A request locks the
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
// descriptor values of 60 KiB costs what one of 6 bytes does. Each shard
// keeps its buckets in an open-addressed table of its own (see table.go):
// fixed-size slots, no pointers, and removals that leave no tombstone, so
// the table's size depends only on the most buckets the shard has held at
// once, never on how many keys have come and gone. A shard holds at most
// its share of the key bound (WithMaxKeys; 16,384 at the default bound),
// and its table stops growing at the slots that share needs at a load of
// 4/5. So the store's memory is bounded in bytes, however clients choose
// their keys: at most maxKeys × BucketBytes + FixedBytes (80 bytes a
// bucket; 80 MiB and 1,088 KiB at the default bound, the fixed part
// mostly the allocator's rounding of the tables' arrays), and, below its bound, at
// most 2 × BucketBytes per bucket held (a table that has just doubled is
// 2/5 full). (A shard passes its share only when one request brings more
// new buckets to it than its share, all of them held at once, which a
// bound of 64 × rls.MaxLimited or more rules out; the shard's next new key
// brings it back within its share.)
//
// A new key arriving at a full shard first drops full buckets found in a
// short scan (the same as absent: nothing is lost); if none is full it
// evicts the fullest bucket of the scan that the request does not use, and
// that bucket's client then sees a fresh, full bucket: what it had taken is
// forgotten, up to one burst, or up to two for a bucket below zero (its
// debt and the fresh burst), once per eviction (counted by Evictions). With
// the bound above the number of keys active within one refill period there
// are none. The limits requests bring (overrides) are computed into bucket
// arithmetic through a memo of 256 entries, so they cannot grow the process
// either.
package memstore
