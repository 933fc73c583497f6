package bench

import (
	"net/http"
	"net/http/httptest"
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
