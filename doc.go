// Package admit is admission control for Go: how often (token-bucket rate
// limiters) and how many (bounded resource pools).
//
// The root package holds what the implementations share: the Limiter
// interface, the Clock they read, Options, and the sentinel errors that
// their errors wrap (a cancelled context comes back as ctx.Err(); chanpool
// keeps two sentinels of its own, ErrClosed and ErrSaturated, which wrap
// none of these). The implementations live in their own packages and are
// drop-in replacements for one another:
//
//   - mutexbucket: one sync.Mutex around (tokens, last). The reference,
//     the simplest to audit, fine when few goroutines share a bucket.
//   - casbucket: a compare-and-swap loop on an atomic.Pointer to an
//     immutable (tokens, last) pair. Lock-free; rejections only load, so they
//     scale across cores; each admission allocates the new pair.
//   - shardedbucket: the capacity and rate split exactly over cache-line
//     padded shards of one atomic word each, with a home shard per processor.
//     Admissions on different cores write different cache lines; a bucket
//     that runs dry collapses into one central word (nothing to shard) and
//     spreads again when tokens accumulate; the global bound stays exact.
//   - gcra: the token bucket in one atomic word (the empty point on the
//     refill stream, GCRA's theoretical arrival time): one CompareAndSwap
//     per decision and no allocation.
//   - fixedwindow, slidinglog, slidingwindow, leakybucket: the other classic
//     algorithms under the same interface (a counter per aligned window, an
//     exact log of timestamps, a weighted two-counter estimate, a bounded
//     queue drained at the rate); docs/algorithms.md compares them.
//   - chanpool: a generic bounded resource pool on one buffered channel.
//
// Per client, the KeyedLimiter and PolicyLimiter interfaces:
//
//   - keyed: one token bucket per key (API key, user, address) in one
//     process, with bounded memory and no goroutine. keyed.New(capacity,
//     rate) takes the burst first, like every bucket's New; NewLimits takes
//     several named limits decided all or nothing.
//   - redisbucket (its own module): the same limiter shared by every replica
//     through Redis, one Lua script per decision on the server's clock.
//   - admithttp: net/http middleware over either: keys, 429 with the IETF
//     RateLimit and Retry-After headers, per-request limits (tiers).
//   - admitgrpc (its own module): gRPC server and client interceptors.
//   - admitotel (its own module): OpenTelemetry metrics for any limiter,
//     counted off the hot path.
//   - rls (its own module): admit-rls, Envoy's rate limit service on keyed
//     or Redis, configured like envoyproxy/ratelimit.
//
// Migrating:
//
//   - rate: a drop-in for golang.org/x/time/rate with the same API, which
//     never over-admits through its implicit-time methods (the explicit-time
//     ones, AllowN and the like, keep x/time/rate's behaviour on times that go
//     backwards; its package doc says so). Note the argument order:
//     rate.NewLimiter(rate, burst) as in x/time/rate, against this module's
//     New(capacity, rate).
//
// Limit and PolicyLimiter describe several limits per key chosen per call;
// PolicyLimiter's doc states their rules.
//
// All four buckets refill lazily from a monotonic clock on each call (no
// background goroutine), keep balances in integer sub-token units derived
// from absolute time (no drift, and no overflow within the 146-year horizon
// from a bucket's creation), add nothing for clock readings older than one
// already applied, never admit more than capacity + rate × elapsed, and
// serve blocked callers in arrival order through reservations. The bound
// holds on the real clock and on any monotonic Clock, as Clock asks. On a
// clock that steps back (a fake one set earlier) mutexbucket, casbucket and
// gcra keep it, but shardedbucket's collapse may count a full shard's
// discarded refill again (its package doc has the case).
// docs/design.md in the repository states the whole contract; the README and
// docs/benchmarks.md compare the implementations with each other and with
// golang.org/x/time/rate on measured numbers.
package admit
