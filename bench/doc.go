// Package bench compares the admit buckets and pool with the libraries Go
// services use today. It is its own module so that peers and plotting never
// enter the core module's dependency graph.
//
// # Implementations
//
// Impls lists the token buckets in the fixed order every table and chart
// uses: mutexbucket, casbucket, shardedbucket and gcra from this module, its
// x/time/rate drop-in rate (Allow, AllowN, Wait, adapted exactly as xrate),
// then golang.org/x/time/rate (xrate: Allow, AllowN, Wait), github.com/juju/ratelimit
// (juju: TakeAvailable, Wait) and go.uber.org/ratelimit (uber: Take). Each is
// wrapped in an adapter that satisfies Limiter, so all of them pay the same
// interface dispatch. Where a peer cannot do what a case asks, the case
// leaves it out and says so:
//
//   - uber's Take blocks until the caller's turn and never rejects; it
//     appears only in the blocking benchmark and the waiters table.
//   - juju's TakeAvailable(n) takes a part when fewer than n are left; the
//     n=8 case runs on a bucket that never empties, where that never happens.
//   - juju's Wait and uber's Take take no context.
//
// Floors are measured in the same run, through the same interface: one
// time.Since on a fixed origin (the clock read every bucket here makes), one
// atomic add on a counter all goroutines share, and one on a counter padded
// to its own cache lines per goroutine.
//
// # Benchmarks
//
// Names are key=value, so that benchstat can pivot:
//
//	BenchmarkTryAcquire/case=<admit|reject|mixed|n=8>/mode=<serial|parallel>/impl=<name>
//	BenchmarkAcquire/case=rarewait/mode=<serial|parallel>/impl=<name>
//	BenchmarkRate/op=<allow|allown|wait|reserve>/case=<admit|reject>/mode=<serial|parallel>/impl=<rate|xrate>
//
// and `benchstat -col /impl` gives one row per case and mode, one column per
// implementation. mode=parallel uses RunParallel; GOMAXPROCS is set only
// through -cpu. Every benchmark of limiters' decisions (TryAcquire,
// Acquire, the keyed ones, Middleware) reports admit/op, the fraction of
// calls admitted, which shows that admit never empties, reject never admits, and
// what part mixed admits. BenchmarkRate calls rate and x/time/rate
// directly, without the adapter, API call for API call (see docs/rate.md).
//
// BenchmarkMiddleware/case=<admit|deny>/mode=<serial|parallel>/impl=<name>
// compares the HTTP middlewares of MiddlewareImpls (none, admithttp,
// httprate, tollbooth v7) through httptest.NewRecorder; impl=none is its
// floor.
//
// # Commands
//
//	go run ./cmd/report -quick   quick subset, benchstat table to stdout (make bench)
//	go run ./cmd/report          full run into ../results (make bench-full)
//	go run ./cmd/plots           SVG charts of the newest full result (make plots)
//	go run ./cmd/storm           accuracy and waiter fairness tables (make storm)
//	go run ./cmd/loadrun         vegeta against a loopback server, per middleware (make loadrun)
//	go run ./cmd/targets [FILE]  the ratios the targets are stated in
package bench
