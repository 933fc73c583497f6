package admithttp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admithttp"
	"github.com/admit-go/admit/keyed"
)

// honouring is a real keyed.Limiter behind the check a remote limiter makes
// first (redisbucket's AllowN does, as admit.KeyedLimiter allows): a call
// whose context has ended returns ctx.Err() unchanged and a zero Decision.
// It is a stand-in, kept for want of a real one here: no limiter of this
// module consults its context (keyed decides in memory and never waits), so
// none can return the request's context error, and redisbucket, which does,
// lives in a module this one must not require. integration's
// TestHTTPCancelledRequestRedis runs the same test against redisbucket on a
// real redis-server.
type honouring struct{ *keyed.Limiter }

func (h honouring) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	if err := ctx.Err(); err != nil {
		return admit.Decision{}, err
	}
	return h.Limiter.AllowN(ctx, key, n)
}

// TestCancelledRequest: a client that closes its connection right after
// sending a request ends the request's context; a limiter that honours it
// returns context.Canceled without a decision. That is not a backend
// failure, so WithFailOpen must not serve the request: the handler never
// runs, whatever the failure policy, and the bucket of 1 is not touched.
// Each request is held in front of the middleware until the server has
// seen the client leave, so every one of them takes that path.
func TestCancelledRequest(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprint("failOpen=", open), func(t *testing.T) {
			k, err := keyed.New(1, 1e-3)
			if err != nil {
				t.Fatal(err)
			}
			var reported []error
			var mu sync.Mutex
			opts := []admithttp.Option{admithttp.WithOnError(func(_ *http.Request, err error) {
				mu.Lock()
				reported = append(reported, err)
				mu.Unlock()
			})}
			if open {
				opts = append(opts, admithttp.WithFailOpen())
			}
			var served atomic.Int64
			limited := admithttp.Middleware(honouring{k}, opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				served.Add(1)
			}))
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
			mu.Lock()
			defer mu.Unlock()
			if len(reported) != requests || !errors.Is(reported[0], context.Canceled) {
				t.Errorf("WithOnError got %d errors (first %v); want %d, context.Canceled", len(reported), reported, requests)
			}
			// Nothing was taken: the one token is still there.
			if d, err := k.AllowN(context.Background(), "127.0.0.1", 0); err != nil || d.Remaining != 1 {
				t.Errorf("the client's bucket: %+v, %v; want its one token", d, err)
			}
		})
	}
}
