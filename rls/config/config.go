// Package config implements the rate limit configuration of admit-rls: the
// YAML format of envoyproxy/ratelimit (a domain and nested descriptors with
// key, value, "*" wildcards and rate_limit), loaded from a set of files into
// an immutable Config that answers which limit a request's descriptor
// matches.
//
// # Format
//
// Every field of envoyproxy/ratelimit's format is read: domain, descriptors,
// key, value, rate_limit (unit, requests_per_unit, unlimited, name, replaces),
// shadow_mode, detailed_metric, value_to_metric, share_threshold,
// quota_mode and metadata (checked as there, its keys unchecked, then
// ignored: it only reaches envoyproxy/ratelimit's responses under
// RESPONSE_DYNAMIC_METADATA, which admit-rls refuses). A file is checked as that service checks it, with the same
// messages: unknown keys, a key that is not a string, a list of something
// other than maps, an empty domain or key, a duplicate composite key, a
// duplicate domain (unless domains are merged), an invalid unit, a unit with
// unlimited, an empty or self-naming replaces entry, share_threshold on a
// value that is not a wildcard, metadata that is no protobuf Struct. Two extensions sit beside requests_per_unit:
// burst, the bucket's capacity (by default requests_per_unit), and debt:
// true, which charges the rule's hits whatever the request's outcome, for
// usage reported after the response (see package rls). Any uint32
// requests_per_unit loads, as in envoyproxy/ratelimit; whether a store
// can hold a rule is checked by the service (rls.Service.Check).
//
// What admit-rls does not implement is refused by name: quota_mode: true.
// share_threshold makes every value matching its wildcard share one bucket
// (Lookup reports the wildcard to key it by). detailed_metric and
// value_to_metric are accepted; they name envoyproxy/ratelimit's
// per-descriptor statistics, which admit-rls does not export (its metrics
// are per domain), so they change no decision and no metric.
//
// # Matching
//
// A descriptor's entries are matched level by level: first key_value, then a
// wildcard of that level (a value, or key, holding "*", each "*" matching any
// run of characters, the empty one included; the first such in file order
// that matches), then the key alone. A "*" anywhere matches as on
// envoyproxy/ratelimit's main branch since 2026-03; before, only a trailing
// one did. The limit found at the
// level of the last entry applies; a descriptor with more entries than the
// configuration's depth, or whose path ends early, matches no limit.
//
// A Config is immutable once loaded and safe for concurrent use.
package config
