// Package admitotel implements OpenTelemetry metrics for the limiters of
// github.com/admit-go/admit: Wrap puts a counting admit.KeyedLimiter (and
// admit.PolicyLimiter) in front of keyed, redisbucket or any other keyed
// limiter, and WrapLimiter a counting admit.Limiter in front of a bucket.
// For a decider that is neither (admit-rls decides a request's several
// buckets together), NewCounter returns a Counter that counts the decisions
// its caller reports to it, as Wrap would count them.
//
// The wrappers and Counters report these instruments, through the metric
// API of the MeterProvider that WithMeterProvider names
// (otel.GetMeterProvider() by default), every one with the attribute
// admit.limiter = WithName's name:
//
//	admit.decisions       counter {decision}  admit.result, admit.policy (when the deciding limit has a Name)
//	admit.tokens          counter {token}     admit.result (the tokens the calls asked for; saturates at 2^63-1)
//	admit.keys            gauge   {key}       keys held (limiters with keyed's Stats method)
//	admit.keys.evicted    counter {key}       live keys forgotten to make room (keyed's Stats)
//	admit.keys.refused    counter {key}       new keys refused for want of room (keyed's Stats)
//	admit.backend.errors  counter {error}     decisions that failed on the backend (errors wrapping admit.ErrUnavailable)
//
// A limiter with keyed's Stats has no backend: the admit.ErrUnavailable of
// its RefuseNew policy counts in admit.keys.refused, not admit.backend.errors.
//
// admit.result is "allowed", "denied" or "error": "error" for every call
// that returned an error (a backend outage, a cost above the capacity, a
// cancelled wait), whatever Decision came with it; "allowed" and "denied"
// follow Decision.Allowed, or for a bucket whether the call admitted. A
// peek (n = 0) is counted as any call is, "allowed", except the one
// admithttp and admitgrpc make to fill the fields of a request refused for
// costing more than the whole quota: that request is one decision, an
// "error", and the middleware's read of the key's state for its response is
// not a second one.
// Costs can come from request data, so admit.tokens adds them saturating:
// it stops at the largest int64 rather than wrap, and never decreases. A
// Prometheus exporter names them admit_decisions_total, admit_tokens_total
// and so on.
//
// # No cost on the hot path
//
// A wrapped call, or a Counter's Count, records nothing through the metric
// API. It adds to counters of its own, one cache-line-padded set per
// processor (P), chosen by the P the caller runs on and written with the
// goroutine pinned to it, so callers on different cores write different
// cache lines and need no locked instruction. The instruments are
// asynchronous: at collection time (a Prometheus scrape, a periodic reader's
// tick) one callback sums the per-processor counters and observes the
// totals, and reads keyed's Stats. A wrapped decision allocates nothing.
// BenchmarkOverhead measures what it costs over the bare call
// (docs/metrics.md has the runs). On the project's 2-vCPU Intel Xeon KVM
// guest at be2e030 (results/otel-2026-12-06-vm-be2e030-benchstat.txt) it
// is about 4 ns serially (-cpu 1: 3.9 ns around mutexbucket's TryAcquire,
// 3.9–4.3 ns around keyed's AllowN) and more on two contended cores
// (-cpu 2: 5.8–7.8 ns around keyed's AllowN, 11.1 ns around mutexbucket's
// TryAcquire); an earlier run on a 2-core AMD EPYC guest at d975ddc (git
// history) measured 0.7–3.1 ns. Wrap calls a *keyed.Limiter through
// AllowNInto and AllowLimitsInto, which write the Decision into the
// wrapper's own result: returned through one more call, the six-field
// Decision would be copied through the stack, about 10 ns on amd64. Other
// limiters are called through the interface and pay that copy.
//
// Policy names (Decision.Policy) are labels: the first 64 distinct names a
// wrapper sees, of at most 1024 bytes each, get counters of their own, and
// later or longer ones are counted without the admit.policy attribute. Each result of admit.decisions is one series
// per policy that decided it: the series without admit.policy is reported
// once a decision without a name has been counted, or while no name has
// been seen, never as a second, all-zero series beside the named ones. Names come from the limits the server passes,
// never from request data, so a service has a handful.
package admitotel
