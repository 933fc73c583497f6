package integration_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admithttp"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/redisbucket"
	"github.com/admit-go/admit/redisbucket/redistest"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// get makes one GET request to srv and returns its response, the body read
// and closed.
func get(t *testing.T, srv *httptest.Server) *http.Response {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestHTTPRedisLimits: admithttp over redisbucket.NewLimits, bare and
// through admitotel's wrapper, lists both limits in RateLimit-Policy and
// names the deciding one in RateLimit (it named "default", redisbucket
// having no Limits method).
func TestHTTPRedisLimits(t *testing.T) {
	rdb := startRedis(t)
	for _, wrapped := range []bool{false, true} {
		name := "bare"
		if wrapped {
			name = "admitotel"
		}
		t.Run(name, func(t *testing.T) {
			kl := burstDaily(t, rdb, "http-"+name, wrapped)
			srv := httptest.NewServer(admithttp.Middleware(kl)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
			defer srv.Close()
			for i, want := range []int{200, 200, 429} {
				resp := get(t, srv)
				if resp.StatusCode != want {
					t.Fatalf("request %d: %s; want %d", i, resp.Status, want)
				}
				if got, want := resp.Header.Get("RateLimit-Policy"), `"burst";q=2;w=3600, "daily";q=1000;w=86400`; got != want {
					t.Fatalf("request %d: RateLimit-Policy %s; want %s", i, got, want)
				}
				if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"burst";r=`) {
					t.Fatalf("request %d: RateLimit %s; want burst to decide", i, got)
				}
			}
		})
	}
}

// TestHTTPCancelledRequestRedis: with redisbucket on a real redis-server,
// a request whose client closed its connection before the limiter was
// asked is not served, whatever the failure policies: redisbucket returns
// the request's context.Canceled, which no policy turns into an admission.
func TestHTTPCancelledRequestRedis(t *testing.T) {
	rdb := startRedis(t)
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprint("failOpen=", open), func(t *testing.T) {
			var ropts []redisbucket.Option
			var hopts []admithttp.Option
			var reported atomic.Int64
			hopts = append(hopts, admithttp.WithOnError(func(_ *http.Request, err error) {
				if errors.Is(err, context.Canceled) {
					reported.Add(1)
				}
			}))
			if open {
				ropts = append(ropts, redisbucket.WithFailOpen())
				hopts = append(hopts, admithttp.WithFailOpen())
			}
			l, err := redisbucket.New(rdb, 1, 1e-3, append(ropts, redisbucket.WithPrefix(fmt.Sprint("cancel-", open)))...)
			if err != nil {
				t.Fatal(err)
			}
			var served atomic.Int64
			limited := admithttp.Middleware(l, hopts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
			decided := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() { decided <- struct{}{} }()
				<-r.Context().Done() // the client has gone
				limited.ServeHTTP(w, r)
			}))
			defer srv.Close()
			const requests = 20
			for range requests {
				c, err := net.Dial("tcp", srv.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: test\r\n\r\n")); err != nil {
					t.Fatal(err)
				}
				c.Close()
				<-decided
			}
			if got := served.Load(); got != 0 {
				t.Errorf("the handler ran for %d of %d cancelled requests; want none", got, requests)
			}
			if got := reported.Load(); got != requests {
				t.Errorf("%d context.Canceled errors reported; want %d", got, requests)
			}
			// Nothing was taken from the bucket of 1.
			if d, err := l.AllowN(context.Background(), "127.0.0.1", 0); err != nil || d.Remaining != 1 {
				t.Errorf("the client's bucket: %+v, %v; want its one token", d, err)
			}
		})
	}
}

// TestHTTPDeadlineStalledRedis: the rule WithFailOpen's doc states for a
// request whose own deadline passes while the limiter decides. Redis is
// frozen (SIGSTOP: connections stay open, nothing answers). With the
// request's deadline, set in front of the middleware, before redisbucket's
// timeout, redisbucket returns the request's context.DeadlineExceeded:
// no limiter failed, so the answer is 503 though both layers fail open,
// and the handler does not run. With redisbucket's timeout before the
// request's deadline, the stall is the limiter's failure, within the
// request's time: it fails closed blind, and the middleware's WithFailOpen
// serves the request.
func TestHTTPDeadlineStalledRedis(t *testing.T) {
	for _, c := range []struct {
		name            string
		front, backend  time.Duration // the request's deadline, redisbucket's WithTimeout
		backendFailOpen bool
		status          int
		served          int64
	}{
		{"request deadline first", 50 * time.Millisecond, time.Minute, true, http.StatusServiceUnavailable, 0},
		{"backend timeout first", time.Minute, 50 * time.Millisecond, false, http.StatusOK, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := redistest.New(t)
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			ropts := []redisbucket.Option{redisbucket.WithTimeout(c.backend)}
			if c.backendFailOpen {
				ropts = append(ropts, redisbucket.WithFailOpen())
			}
			l, err := redisbucket.New(rdb, 1, 1, ropts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := rdb.Ping(context.Background()).Err(); err != nil { // a connection in the pool
				t.Fatal(err)
			}
			if err := s.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Signal(syscall.SIGCONT) })
			var served atomic.Int64
			var mu sync.Mutex
			var reported []error
			limited := admithttp.Middleware(l, admithttp.WithFailOpen(), admithttp.WithOnError(func(_ *http.Request, err error) {
				mu.Lock()
				reported = append(reported, err)
				mu.Unlock()
			}))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, cancel := context.WithTimeout(r.Context(), c.front)
				defer cancel()
				limited.ServeHTTP(w, r.WithContext(ctx))
			}))
			defer srv.Close()
			resp := get(t, srv)
			if resp.StatusCode != c.status || served.Load() != c.served {
				t.Fatalf("%s, the handler ran %d times; want %d, %d", resp.Status, served.Load(), c.status, c.served)
			}
			// The request's own deadline is reported as itself; the
			// backend's timeout as an outage, never as a context error.
			mu.Lock()
			defer mu.Unlock()
			if len(reported) != 1 || errors.Is(reported[0], context.DeadlineExceeded) != (c.status == http.StatusServiceUnavailable) ||
				errors.Is(reported[0], admit.ErrUnavailable) == (c.status == http.StatusServiceUnavailable) {
				t.Fatalf("WithOnError got %v", reported)
			}
		})
	}
}

// TestHTTPRedisWrapped: redisbucket.New lists its one limit and has no
// FillTime. Through admitotel's wrapper, which has neither method of its
// own, admithttp finds the listed limit down the Unwrap chain and shows its
// w (a wrapper that reported a FillTime of 0 for a limiter without one
// made the middleware leave w out).
func TestHTTPRedisWrapped(t *testing.T) {
	l, err := redisbucket.New(startRedis(t), 2, 0.5, redisbucket.WithPrefix("http-wrapped"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := any(l).(interface{ FillTime() time.Duration }); ok {
		t.Fatal("redisbucket.Limiter has a FillTime method: this test no longer covers a limiter without one")
	}
	w, err := admitotel.Wrap(l, admitotel.WithMeterProvider(sdkmetric.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(admithttp.Middleware(w, admithttp.WithPolicyName("api"))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	resp := get(t, srv)
	if got, want := resp.Header.Get("RateLimit-Policy"), `"api";q=2;w=4`; got != want {
		t.Errorf("RateLimit-Policy %q; want %q (w from the one limit redisbucket lists)", got, want)
	}
}
