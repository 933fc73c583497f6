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
// limit field). A matched descriptor draws from the token bucket of its
// key (the domain and its entries): capacity burst (by default
// requests_per_unit), refilled at requests_per_unit per unit, so a client
// gets the same limit over a unit as with envoyproxy/ratelimit's fixed
// windows, without their double allowance across a window's edge. The cost
// is the descriptor's hits_addend if set (0 checks without taking), else
// the request's (0 meaning 1).
//
// A request is OVER_LIMIT when any enforced descriptor lacks its cost, and
// then it takes from none of its descriptors: the Store decides them all or
// nothing. A descriptor in shadow_mode (or every descriptor under the
// global shadow mode) answers OK when over its limit and is counted; it
// never refuses the request. An unlimited descriptor answers OK with
// limit_remaining 4294967295, as does one whose rule another matched rule
// replaces (by name, the replaces field), and one that matches nothing.
//
// Each status carries current_limit, limit_remaining (whole tokens left)
// and duration_until_reset (exactly until the bucket is full again).
// With headers enabled, the response adds RateLimit-Limit, -Remaining and
// -Reset of the descriptor closest to its limit (the first refusing one
// when refused).
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
