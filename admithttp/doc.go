// Package admithttp implements net/http middleware that admits each request
// against a per-client token bucket held by any admit.KeyedLimiter: the
// in-process keyed.Limiter, or the Redis-backed limiter shared by many
// servers, a one-line change.
//
// A key function names the client (KeyByIP, KeyByForwardedFor behind trusted
// proxies, KeyByHeader for API keys), a cost function weighs the request, and
// every response the limiter decided carries the IETF RateLimit and
// RateLimit-Policy fields (draft-ietf-httpapi-ratelimit-headers-10); a denial
// is 429 Too Many Requests with a Retry-After that is never early. Middleware
// lists the response to every edge: a key that cannot be found, a negative
// cost, a cost above the capacity, a limiter that fails (closed by default).
//
// The middleware adds two small allocations per request (the header values)
// to what the limiter costs, and reads no clock of its own: the Decision
// carries every number the fields need.
package admithttp
