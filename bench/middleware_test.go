package bench

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestMiddlewareImpls checks that every middleware in the comparison does
// what BenchmarkMiddleware and loadrun assume: with admitAll every request
// passes; without, the first passes and the rest get 429 (the floor's
// deny handler answers 429 at once).
func TestMiddlewareImpls(t *testing.T) {
	for _, impl := range MiddlewareImpls {
		h, err := impl.New(true, empty)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1000 {
			if got := serveOnce(h); got != http.StatusOK {
				t.Fatalf("%s, admit all: request %d got %d", impl.Name, i, got)
			}
		}
		h, err = impl.New(false, empty)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			want := http.StatusTooManyRequests
			if i == 0 && impl.Name != "none" {
				want = http.StatusOK
			}
			if got := serveOnce(h); got != want {
				t.Fatalf("%s, quota of 1: request %d got %d, want %d", impl.Name, i, got, want)
			}
		}
		// Another client has its own quota.
		r := benchRequest()
		r.RemoteAddr = "198.51.100.1:1"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if impl.Name != "none" && rec.Code != http.StatusOK {
			t.Fatalf("%s: a second client got %d", impl.Name, rec.Code)
		}
	}
}

// TestBenchMiddlewareCounts checks that BenchmarkMiddleware's body fails a
// run whose timed requests are not what the case says: a middleware that
// admits its first request and every one after (a quota that never takes),
// or that answers 429 where every request should pass. The configured
// middlewares pass in both cases and modes. It runs the body through
// testing.Benchmark at 50 iterations, which reports a failed benchmark as a
// zero result.
func TestBenchMiddlewareCounts(t *testing.T) {
	bt := flag.Lookup("test.benchtime")
	old := bt.Value.String()
	if err := flag.Set("test.benchtime", "50x"); err != nil {
		t.Fatal(err)
	}
	defer flag.Set("test.benchtime", old)

	// leaky passes the pre-check (a 429 for the request after the first,
	// from the check's own client) and then admits everything.
	leaky := MiddlewareImpl{"leaky", func(admitAll bool, next http.Handler) (http.Handler, error) {
		var calls atomic.Int64
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !admitAll && calls.Add(1) == 2 {
				http.Error(w, "429 too many requests", http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		}), nil
	}}
	// stingy passes the pre-check and then denies everything.
	stingy := MiddlewareImpl{"stingy", func(admitAll bool, next http.Handler) (http.Handler, error) {
		var calls atomic.Int64
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) > 1 {
				http.Error(w, "429 too many requests", http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		}), nil
	}}
	for _, parallel := range []bool{false, true} {
		for _, c := range []struct {
			impl     MiddlewareImpl
			admitAll bool
		}{{leaky, false}, {stingy, true}} {
			r := testing.Benchmark(func(b *testing.B) { benchMiddleware(b, c.impl, c.admitAll, parallel) })
			if r.N != 0 {
				t.Errorf("%s, admitAll %v, parallel %v: the benchmark passed (N = %d)", c.impl.Name, c.admitAll, parallel, r.N)
			}
		}
		for _, impl := range MiddlewareImpls {
			for _, admitAll := range []bool{true, false} {
				r := testing.Benchmark(func(b *testing.B) { benchMiddleware(b, impl, admitAll, parallel) })
				if r.N == 0 {
					t.Errorf("%s, admitAll %v, parallel %v: the benchmark failed", impl.Name, admitAll, parallel)
				}
			}
		}
	}
}
