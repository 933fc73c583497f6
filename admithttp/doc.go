// Package admithttp implements net/http middleware that admits each request
// against a per-client token bucket held by any admit.KeyedLimiter: the
// in-process keyed.Limiter, or the Redis-backed limiter shared by many
// servers, a one-line change.
//
// A key function names the client (KeyByIP, KeyByForwardedFor behind trusted
// proxies, KeyByHeader for API keys), a cost function weighs the request, and
// every response the limiter decided carries the IETF RateLimit and
// RateLimit-Policy fields (draft-ietf-httpapi-ratelimit-headers-10); a denial
// is 429 Too Many Requests with a Retry-After that is never early.
//
// A client may be held to several limits at once, a burst and a daily
// quota say, decided all or nothing: a keyed.Limiter from keyed.NewLimits
// applies its own, and WithLimits chooses them per request (a tier from the
// client's authenticated API key or token claim, never from a header the
// client writes; an error wrapping admit.ErrUnknownClient answers 403 for a
// key the server never issued) for any admit.PolicyLimiter. RateLimit-Policy
// then lists every limit and RateLimit names the one that decided.
// WithSkip exempts requests (health checks) from any limiter, and a
// WithLimits function that returns no limits serves its request unlimited. Middleware
// lists the response to every edge: a key that cannot be found, a negative
// cost, a cost above the capacity, a limiter whose backend fails. There the
// limiter's own failure policy is followed when it decides (redisbucket's
// WithFallback or WithFailOpen), and the middleware's (closed by default)
// only when it does not; WithOnError receives every limiter error.
//
// # Metrics
//
// Counting lives in the separate admitotel module, not here: wrap the
// limiter, keyed's or redisbucket's, and hand the wrapper to Middleware,
// which sees an admit.KeyedLimiter (and, through the wrapper's Unwrap, the
// PolicyLimiter that WithLimits needs):
//
//	l, _ := keyed.NewLimits(free)             // or redisbucket.NewLimits(rdb, free)
//	m, _ := admitotel.Wrap(l, admitotel.WithName("api"))
//	h := admithttp.Middleware(m, admithttp.WithLimits(tierOf))(mux)
//
// The wrapper costs about 4 ns per decision in front of keyed serially, and
// 6–8 ns on two contended cores (the 2-vCPU Intel run at be2e030,
// results/otel-2026-12-06-vm-be2e030-benchstat.txt; docs/metrics.md in the
// repository has it and an earlier AMD run).
//
// Pick it over go-chi/httprate or tollbooth for exact token-bucket
// semantics per client, a Retry-After rounded up from the exact wait (not a
// whole window), keys a client cannot spoof, and the standard fields. Per
// admitted request it allocates twice (the header values, and the RateLimit
// string) beyond what setting any header costs, and reads no clock of its
// own: the Decision carries every number the fields need. In one run on a
// busy 2-core machine its own CPU cost per request was 2.8–6.2× below
// httprate's in seven of eight cases, 1.6× for parallel admissions at
// -cpu 2 (docs/per-client.md has the table).
package admithttp
