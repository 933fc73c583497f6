// Package admitgrpc implements gRPC interceptors that admit calls against
// the limiters of github.com/admit-go/admit: server interceptors that
// decide each call (each stream, once, when it opens) against a per-client
// token bucket held by any admit.KeyedLimiter (the in-process keyed.Limiter,
// or the Redis-backed limiter shared by many servers, a one-line change),
// and client interceptors that make each outgoing call wait its turn on an
// admit.Limiter.
//
// A server answers a denial with codes.ResourceExhausted and the details a
// gRPC client can act on: an errdetails.RetryInfo whose RetryDelay is the
// exact wait until the call would be admitted (never early), and an
// errdetails.QuotaFailure naming the policy. Every decided call carries the
// IETF RateLimit and RateLimit-Policy fields (ratelimit, ratelimit-policy,
// with the values admithttp writes): an admitted call that gets a response
// in its header metadata, a denial (with retry-after in whole seconds
// rounded up) and an admitted call that fails in its trailer metadata. Every refusal is sent trailers-only, so a
// client's retryPolicy on RESOURCE_EXHAUSTED retries it (a header frame
// would commit the call to its first attempt), and carries gRFC A6's
// grpc-retry-pushback-ms so that the retry comes when the token is due:
// the exact wait when that is before the call's deadline, -1 (no retry)
// when it is after it or never (a cost above the capacity), none for a
// call without a deadline (see UnaryServerInterceptor).
//
// For metrics, put the admitotel module's wrapper between the limiter and
// the interceptor; the interceptor reads the limits through its Unwrap:
//
//	l, _ := redisbucket.NewLimits(rdb, limits) // or keyed.NewLimits(limits)
//	m, _ := admitotel.Wrap(l, admitotel.WithName("grpc"))
//	s := grpc.NewServer(grpc.UnaryInterceptor(admitgrpc.UnaryServerInterceptor(m)))
//
// The client interceptors wait on the limiter once per call, within the
// call's deadline or the service config's method timeout; grpc-go's
// retries of a call run below them and take no token of their own (see
// UnaryClientInterceptor).
//
// Compared with go-grpc-middleware's ratelimit interceptor (one Limit(ctx)
// error for every caller, no key, no retry hint), it limits each client
// separately, says exactly when to come back, and moves from one process to
// many by changing the limiter.
package admitgrpc
