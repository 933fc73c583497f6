// Package rls implements Envoy's rate limit service (RLS v3,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on token
// buckets: the service of the admit-rls binary, configured like
// envoyproxy/ratelimit (package config) and backed by a Store (package
// memstore in one process, package redisstore on Redis).
//
// # Semantics
//
// Each descriptor of a request is matched against the domain's
// configuration, or takes the limit of its override (the descriptor's
// limit field). A domain the configuration does not hold applies no limit
// at all, overrides included, as in envoyproxy/ratelimit. A matched
// descriptor draws from the token bucket of its key (the domain and its
// entries): capacity burst (by default requests_per_unit), refilled at
// requests_per_unit per unit, exactly, so a client gets the same limit over
// a unit as with envoyproxy/ratelimit's fixed windows, without their double
// allowance across a window's edge. The cost is the descriptor's
// hits_addend if set (0 checks without taking), else the request's (0
// meaning 1). A refund (is_negative_hits) is refused with InvalidArgument
// naming the field: a refund would lift a bucket past the bound that every
// other descriptor keeps.
//
// A request is OVER_LIMIT when any enforced descriptor lacks its cost, and
// then it takes from none of its descriptors, whatever refused it (a rule
// of requests_per_unit: 0, or an override of 0, included): the Store decides
// them all or nothing, in one step. A descriptor in shadow_mode answers OK
// when over its limit and is counted; it never refuses the request. Under
// the global shadow mode a descriptor over its limit still answers
// OVER_LIMIT, and the request's overall code is OK, as in
// envoyproxy/ratelimit.
//
// An override (the descriptor's limit field) replaces the numbers of the
// descriptor's bucket, which it shares with the rule the descriptor
// matches: the balance carries over between the two (see Store), and on a
// descriptor whose rule has debt: true the override is charged as the
// rule is.
//
// # Usage reported after the response
//
// Envoy's apply_on_stream_done sends a request's usage (a hits_addend of
// bytes or tokens, say) once the response is done, when it can no longer
// be refused. On an ordinary rule such a report, larger than what is left,
// would be refused and take nothing, so usage would never count. A rule
// marked debt: true (an admit-rls extension beside burst) tells the two
// apart: its descriptors are charged whatever the request's outcome, down
// to a balance of minus one burst, and refuse the request (over the limit,
// as envoyproxy/ratelimit answers) when the bucket lacked the cost. A
// bucket in debt holds nothing, not even a check (hits_addend 0), until
// refill has repaid the debt: a client checked at the request (hits_addend
// 0) and charged at stream done is refused once its reports have overdrawn
// the budget, and admitted again when the budget has come back. Ordinary
// rules keep all or nothing; a request may mix both.
//
// # Answers
//
// Each limited status carries current_limit, limit_remaining (whole tokens
// left right after its own hit, so a descriptor sent twice answers its
// first take, then both, as envoyproxy/ratelimit does; 0 when the descriptor is over its limit, shadowed or not, and in
// debt, as envoyproxy/ratelimit answers 0 over the limit) and
// duration_until_reset (until the bucket is full again, rounded up to
// whole seconds: Envoy's x-ratelimit-reset header takes its whole seconds,
// so a fraction below one would read 0 there; for a limit
// of zero, which has no bucket, and for a descriptor over its limit that
// no wait lets through, its cost or the request's costs on its key being
// above the burst, at least one unit of the rule, where
// envoyproxy/ratelimit answers the end of the unit's window). An
// unlimited descriptor answers OK with limit_remaining 4294967295; one that
// no limit applies to (it matches no rule, its rule is replaced by another
// matched rule's replaces, or its domain is unknown) answers OK with
// limit_remaining 0 and no current_limit, as in envoyproxy/ratelimit. With
// headers enabled, the response adds RateLimit-Limit, -Remaining and -Reset
// of the descriptor envoyproxy/ratelimit picks: the last one over its
// limit, else the first with the fewest remaining.
//
// A request may carry any number of descriptors (the gRPC message size
// bounds them), at most MaxLimited of them limited.
//
// # Stores
//
// A Store decides a request's hits (one per limited descriptor) all or
// nothing; package storetest is the conformance suite every Store passes.
// The stores do not sit on admit.PolicyLimiter: its AllowLimits decides one
// key against several limits, while a request's descriptors are several
// keys, each with its own cost, decided together. docs/rls.md compares
// admit-rls with envoyproxy/ratelimit.
package rls
