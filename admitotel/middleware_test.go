package admitotel_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admithttp"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestThroughMiddleware puts the wrapper where the limiter went, in
// admithttp's middleware on a real loopback server: the middleware sees
// the same limiter (the fill time included, for RateLimit-Policy's w), and
// the counts are the responses it gave.
func TestThroughMiddleware(t *testing.T) {
	l, err := keyed.New(2, 0.5, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	mp, reader := manualProvider()
	w, err := admitotel.Wrap(l, mp, admitotel.WithName("http"))
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	srv := httptest.NewServer(admithttp.Middleware(w, admithttp.WithPolicyName("api"))(ok))
	defer srv.Close()
	var codes []int
	for range 3 {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if got, want := resp.Header.Get("RateLimit-Policy"), `"api";q=2;w=4`; got != want {
			t.Errorf("RateLimit-Policy %q; want %q", got, want)
		}
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("statuses %v; want 200, 200, 429", codes)
	}
	const lim = "admit.limiter=http"
	expect(t, collect(t, reader), map[string]int64{
		"admit.decisions{" + lim + ",admit.result=allowed}": 2,
		"admit.decisions{" + lim + ",admit.result=denied}":  1,
		"admit.tokens{" + lim + ",admit.result=allowed}":    2,
		"admit.tokens{" + lim + ",admit.result=denied}":     1,
		"admit.keys{" + lim + "}":                           1,
	})
}

// TestThroughMiddlewareLimits: a NewLimits limiter's limits still reach the
// middleware through the wrapper, and the deciding policy is counted.
func TestThroughMiddlewareLimits(t *testing.T) {
	l, err := keyed.NewLimits([]admit.Limit{admit.Per(time.Second, 1).Named("burst"), admit.Per(time.Hour, 10).Named("hourly")},
		admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	w, reader := wrapManual(t, l)
	srv := httptest.NewServer(admithttp.Middleware(w)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for range 2 {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.Header.Get("RateLimit-Policy"), `"burst";q=1;w=1, "hourly";q=10;w=3600`; got != want {
			t.Errorf("RateLimit-Policy %q; want %q", got, want)
		}
	}
	const lim = "admit.limiter=default"
	expect(t, collect(t, reader), map[string]int64{
		"admit.decisions{" + lim + ",admit.policy=burst,admit.result=allowed}": 1,
		"admit.decisions{" + lim + ",admit.policy=burst,admit.result=denied}":  1,
		"admit.tokens{" + lim + ",admit.result=allowed}":                       1,
		"admit.tokens{" + lim + ",admit.result=denied}":                        1,
		"admit.keys{" + lim + "}":                                              1,
	})
}

// TestWrapperHidesNothing: the wrapper has neither FillTime nor Limits of
// its own, so it can neither hide the wrapped limiter's nor claim one the
// wrapped limiter lacks (a FillTime of 0 made the middleware leave w out
// for a limiter that lists its one limit and has no FillTime, as
// redisbucket's: integration's TestHTTPRedisWrapped runs that case on a
// real redis-server); the middleware finds what the wrapped limiter has
// through Unwrap.
func TestWrapperHidesNothing(t *testing.T) {
	k, err := keyed.NewLimits([]admit.Limit{admit.Per(4*time.Second, 2)}, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := admitotel.Wrap(k, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := any(w).(interface{ FillTime() time.Duration }); ok {
		t.Error("the wrapper has a FillTime method of its own")
	}
	if _, ok := any(w).(interface{ Limits() []admit.Limit }); ok {
		t.Error("the wrapper has a Limits method of its own")
	}
	srv := httptest.NewServer(admithttp.Middleware(w, admithttp.WithPolicyName("api"))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.Header.Get("RateLimit-Policy"), `"api";q=2;w=4`; got != want {
		t.Errorf("RateLimit-Policy %q; want %q (w from the wrapped limiter)", got, want)
	}
}

// TestUnsatisfiableCountedOnce: a request that costs more than the whole
// quota is one decision, an error, and admits nothing. The middleware then
// peeks (n = 0) for the key's state to fill the 413's fields; through the
// wrapper that peek was counted as an allowed decision, one phantom
// admission per oversized request. Through AllowN and through AllowLimits.
func TestUnsatisfiableCountedOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []admithttp.Option
	}{
		{"allown", nil},
		{"limits", []admithttp.Option{admithttp.WithLimits(func(*http.Request) ([]admit.Limit, error) {
			return []admit.Limit{admit.Per(time.Second, 2).Named("burst")}, nil
		})}},
	} {
		t.Run("path="+tc.name, func(t *testing.T) {
			l, err := keyed.New(2, 1, admit.WithClock(buckettest.NewFakeClock(0)))
			if err != nil {
				t.Fatal(err)
			}
			mp, reader := manualProvider()
			w, err := admitotel.Wrap(l, mp, admitotel.WithName("http"))
			if err != nil {
				t.Fatal(err)
			}
			served := 0
			opts := append([]admithttp.Option{admithttp.WithCost(func(*http.Request) int64 { return 3 })}, tc.opts...)
			srv := httptest.NewServer(admithttp.Middleware(w, opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ })))
			defer srv.Close()
			resp, err := srv.Client().Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || served != 0 {
				t.Fatalf("status %d, served %d; want 413, nothing served", resp.StatusCode, served)
			}
			if resp.Header.Get("RateLimit") == "" {
				t.Error("no RateLimit field: the peek for it did not happen")
			}
			got := collect(t, reader)
			var decisions int64
			for k, v := range got {
				if strings.HasPrefix(k, "admit.decisions{") {
					decisions += v
					if !strings.Contains(k, "admit.result=error") && v != 0 {
						t.Errorf("%s = %d; want only the one error", k, v)
					}
				}
			}
			if decisions != 1 {
				t.Errorf("%d decisions counted; want 1 (%v)", decisions, got)
			}
		})
	}
}
