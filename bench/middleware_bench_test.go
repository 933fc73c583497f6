package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// BenchmarkMiddleware measures a rate-limiting middleware's own cost per
// request, with no network: a request through httptest.NewRecorder to a
// handler that writes nothing. mode=serial is one client; mode=parallel is
// one client per goroutine (RunParallel), as on a server, so it measures
// contention inside the middleware, not on one client's bucket.
//
//	BenchmarkMiddleware/case=<admit|deny>/mode=<serial|parallel>/impl=<none|admithttp|httprate|tollbooth>
//
// impl=none is the floor: the recorder and the empty handler alone under
// case=admit, the recorder receiving a bare http.Error 429 under case=deny,
// so a middleware's own cost is its ns/op minus none's. (The recorder
// clones the header map on WriteHeader, which a real server does not, so
// denials cost more here than on a server.) case=admit admits every
// request (a quota no run can spend), case=deny denies every request after
// the first (a quota of 1 that never comes back within the run). Every
// middleware keys by RemoteAddr, IPv6 by /64, as configured in
// middlewareImpls; each sets its own response headers (admithttp the IETF
// RateLimit fields, httprate and tollbooth their X-RateLimit-* ones).
func BenchmarkMiddleware(b *testing.B) {
	for _, c := range []string{"admit", "deny"} {
		for _, mode := range benchModes {
			for _, impl := range MiddlewareImpls {
				b.Run("case="+c+"/mode="+mode+"/impl="+impl.Name, func(b *testing.B) {
					benchMiddleware(b, impl, c == "admit", mode == "parallel")
				})
			}
		}
	}
}

// benchMiddleware times one request through impl's middleware, serially or
// from one client per RunParallel goroutine, and reports admit/op, the
// fraction of the timed requests answered 200. It fails the benchmark when
// the timed requests were not what the case says: under admitAll every one
// admitted; otherwise none, but for the first request of each parallel
// client, which spends that client's quota of 1.
func benchMiddleware(b *testing.B, impl MiddlewareImpl, admitAll, parallel bool) {
	h, err := impl.New(admitAll, empty)
	if err != nil {
		b.Fatal(err)
	}
	want := http.StatusOK
	if !admitAll {
		want = http.StatusTooManyRequests
		h.ServeHTTP(httptest.NewRecorder(), benchRequest()) // spend the quota of 1
	}
	if got := serveOnce(h); got != want {
		b.Fatalf("status %d, want %d", got, want)
	}
	b.ReportAllocs()
	// cpu-ns/op is the whole process's CPU time per
	// request, garbage collection included. Unlike ns/op
	// it leaves out time spent waiting for a CPU, so it
	// stays comparable on a machine shared with other work.
	cpu0, cpuOK := processCPU()
	defer func() {
		if cpu1, _ := processCPU(); cpuOK && b.N > 0 {
			b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
		}
	}()
	// The status is read from the recorder each request writes anyway:
	// a load and a counter, the same for every middleware and the floor.
	var admitted, clients atomic.Int64
	if !parallel {
		r := benchRequest()
		var ok int64
		b.ResetTimer()
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code == http.StatusOK {
				ok++
			}
		}
		admitted.Add(ok)
	} else {
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			// Each goroutine is its own client, as on a
			// server; under deny its first request spends
			// its quota.
			id := clients.Add(1)
			r := benchRequest()
			r.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:51234", id>>16&255, id>>8&255, id&255)
			var ok int64
			for pb.Next() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if rec.Code == http.StatusOK {
					ok++
				}
			}
			admitted.Add(ok)
		})
	}
	b.StopTimer()
	n, ok := int64(b.N), admitted.Load()
	switch {
	case admitAll && ok != n:
		b.Fatalf("%s: %d of %d requests admitted, want all", impl.Name, ok, n)
	case !admitAll && ok > clients.Load():
		b.Fatalf("%s: %d of %d requests admitted, want at most %d (one per new client)", impl.Name, ok, n, clients.Load())
	}
	if n > 0 {
		b.ReportMetric(float64(ok)/float64(n), "admit/op")
	}
}

var empty = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

func benchRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://api.test/v1/items", nil)
	r.RemoteAddr = "192.0.2.10:51234"
	return r
}

func serveOnce(h http.Handler) int {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, benchRequest())
	return rec.Code
}
