package redisbucket_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admithttp"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/redisbucket"
	"github.com/admit-go/admit/redisbucket/redistest"
)

// answer is what one response said: its status and the fields admithttp
// sets, -1 or "" when absent.
type answer struct {
	status     int
	policy     string // RateLimit-Policy
	r, t       int64  // RateLimit's parameters
	retryAfter int64
}

func ask(t *testing.T, srv *httptest.Server, client string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Client", client)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	a := answer{status: resp.StatusCode, policy: resp.Header.Get("RateLimit-Policy"), r: -1, t: -1, retryAfter: -1}
	if v := resp.Header.Get("RateLimit"); v != "" {
		if _, err := fmt.Sscanf(v, `"default";r=%d;t=%d`, &a.r, &a.t); err != nil {
			t.Fatalf("RateLimit %q: %v", v, err)
		}
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		var err error
		if a.retryAfter, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("Retry-After %q: %v", v, err)
		}
	}
	return a
}

// matches reports whether got is want, where want's t and retryAfter are
// the values for requests at the instant the phase began: a request slack
// whole seconds later may report them up to slack less (the waits shrink as
// time passes, and both are rounded up).
func (want answer) matches(got answer, slack int64) bool {
	near := func(g, w int64) bool { return g == w || (w > slack && g <= w && g >= w-slack) }
	return got.status == want.status && got.policy == want.policy && got.r == want.r &&
		near(got.t, want.t) && near(got.retryAfter, want.retryAfter)
}

// TestMiddlewareOutage puts admithttp in front of a redisbucket Limiter on a
// real redis-server, on a real HTTP server and client on loopback, kills
// the server, and checks that the middleware obeys the limiter's failure
// policy, whichever policy the middleware itself has:
//
//   - WithFallback: the fallback's decisions, its capacity of 2 admitted
//     with its fields, then 429 with its Retry-After;
//   - WithFailOpen: every request admitted, without fields (no state);
//   - fail closed (the default): no decision, so the middleware's own
//     policy answers: 503 with Retry-After 1, or its WithFailOpen admits.
//
// Every error reaches WithOnError and wraps admit.ErrUnavailable.
func TestMiddlewareOutage(t *testing.T) {
	for _, policy := range []string{"fallback", "open", "closed"} {
		for _, mwOpen := range []bool{false, true} {
			t.Run(fmt.Sprintf("policy=%s/middlewareFailOpen=%v", policy, mwOpen), func(t *testing.T) {
				testMiddlewareOutage(t, policy, mwOpen)
			})
		}
	}
}

// slack is the whole seconds since start, rounded up.
func slack(start time.Time) int64 { return int64(time.Since(start)/time.Second) + 1 }

func testMiddlewareOutage(t *testing.T, policy string, mwOpen bool) {
	s, err := redistest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()

	// 3 tokens per key in Redis, 2 in the fallback; both refill one token
	// per 1000 s, so nothing refills during the test.
	const rate = 1e-3
	opts := []redisbucket.Option{redisbucket.WithTimeout(100 * time.Millisecond)}
	switch policy {
	case "fallback":
		fb, err := keyed.New(2, rate)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, redisbucket.WithFallback(fb))
	case "open":
		opts = append(opts, redisbucket.WithFailOpen())
	}
	l, err := redisbucket.New(c, 3, rate, opts...)
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var reported []error
	mwOpts := []admithttp.Option{
		admithttp.WithKey(admithttp.KeyByHeader("Client")),
		admithttp.WithOnError(func(_ *http.Request, err error) {
			mu.Lock()
			reported = append(reported, err)
			mu.Unlock()
		}),
	}
	if mwOpen {
		mwOpts = append(mwOpts, admithttp.WithFailOpen())
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	srv := httptest.NewServer(admithttp.Middleware(l, mwOpts...)(ok)) // on 127.0.0.1
	defer srv.Close()
	takeReported := func() []error {
		mu.Lock()
		defer mu.Unlock()
		r := reported
		reported = nil
		return r
	}

	// Redis up: Redis decides, 3 admitted, then 429 with Redis's fields.
	// w is 3000 s, from the one limit redisbucket lists (Limits); the
	// fallback's bucket is another, so its fields below have no w.
	redisPolicy := `"default";q=3;w=3000`
	start := time.Now()
	for i, want := range []answer{
		{200, redisPolicy, 2, 1000, -1},
		{200, redisPolicy, 1, 2000, -1},
		{200, redisPolicy, 0, 3000, -1},
		{429, redisPolicy, 0, 3000, 1000},
	} {
		if got := ask(t, srv, "a"); !want.matches(got, slack(start)) {
			t.Fatalf("Redis up, request %d: got %+v, want %+v", i, got, want)
		}
	}
	if r := takeReported(); len(r) != 0 {
		t.Fatalf("Redis up: errors reported: %v", r)
	}

	s.Stop()
	var want []answer
	switch {
	case policy == "fallback":
		fbPolicy := `"default";q=2`
		want = []answer{
			{200, fbPolicy, 1, 1000, -1},
			{200, fbPolicy, 0, 2000, -1},
		}
		for range 6 {
			want = append(want, answer{429, fbPolicy, 0, 2000, 1000})
		}
	case policy == "open" || mwOpen:
		for range 8 {
			want = append(want, answer{200, "", -1, -1, -1})
		}
	default:
		for range 8 {
			want = append(want, answer{503, "", -1, -1, 1})
		}
	}
	start = time.Now()
	for i, w := range want {
		if got := ask(t, srv, "b"); !w.matches(got, slack(start)) {
			t.Fatalf("Redis down, request %d: got %+v, want %+v", i, got, w)
		}
	}
	r := takeReported()
	if len(r) != len(want) {
		t.Fatalf("Redis down: %d errors reported for %d requests: %v", len(r), len(want), r)
	}
	for _, err := range r {
		if !errors.Is(err, admit.ErrUnavailable) {
			t.Fatalf("reported %v, which does not wrap admit.ErrUnavailable", err)
		}
	}
}
