package admithttp_test

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admithttp"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
)

func ExampleMiddleware() {
	// Each client: a burst of 2, then 1 request per second. (A stopped
	// fake clock keeps the output fixed; drop the option in real code.)
	l, err := keyed.New(2, 1, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		panic(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := httptest.NewServer(admithttp.Middleware(l, admithttp.WithPolicyName("api"))(hello))
	defer srv.Close()

	for range 3 {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
		fmt.Println("  RateLimit-Policy:", resp.Header.Get("RateLimit-Policy"))
		fmt.Println("  RateLimit:", resp.Header.Get("RateLimit"))
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			fmt.Println("  Retry-After:", ra)
		}
	}
	// Output:
	// 200 OK
	//   RateLimit-Policy: "api";q=2;w=2
	//   RateLimit: "api";r=1;t=1
	// 200 OK
	//   RateLimit-Policy: "api";q=2;w=2
	//   RateLimit: "api";r=0;t=2
	// 429 Too Many Requests
	//   RateLimit-Policy: "api";q=2;w=2
	//   RateLimit: "api";r=0;t=2
	//   Retry-After: 1
}

func ExampleKeyByForwardedFor() {
	// Behind a load balancer in 10.0.0.0/8, which appends the address of
	// its peer to X-Forwarded-For.
	key := admithttp.KeyByForwardedFor(netip.MustParsePrefix("10.0.0.0/8"))

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.1.2.3:41000"                          // the load balancer
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.7") // 6.6.6.6 is the client's own claim
	k, err := key(r)
	fmt.Println(k, err)

	r.RemoteAddr = "203.0.113.9:5555" // not through the load balancer: the header is ignored
	k, err = key(r)
	fmt.Println(k, err)
	// Output:
	// 198.51.100.7 <nil>
	// 203.0.113.9 <nil>
}

// Tiers: the limits come from the client's API key, looked up in the
// server's accounts (never from a header the client could write itself),
// an unknown key is refused 403 before it can become a bucket, and a
// health check is not limited at all.
func ExampleWithLimits() {
	free := []admit.Limit{
		admit.Per(time.Second, 1).WithBurst(2).Named("burst"),
		admit.Per(24*time.Hour, 1000).Named("daily"),
	}
	paid := []admit.Limit{
		admit.Per(time.Second, 50).WithBurst(100).Named("burst"),
		admit.Per(24*time.Hour, 100_000).Named("daily"),
	}
	accounts := map[string][]admit.Limit{"alice": free, "bob": paid} // your account store
	apiKey := admithttp.KeyByHeader("X-API-Key")
	tier := func(r *http.Request) ([]admit.Limit, error) {
		if r.URL.Path == "/healthz" {
			return nil, nil // unlimited
		}
		key, err := apiKey(r)
		if err != nil {
			return nil, err // no key: 400
		}
		if limits, ok := accounts[key]; ok {
			return limits, nil
		}
		return nil, fmt.Errorf("%w: API key sha256:%.4x", admit.ErrUnknownClient, sha256.Sum256([]byte(key))) // 403
	}
	// Any admit.PolicyLimiter: keyed in one process, redisbucket across
	// servers. Its own limits apply to its Allow and AllowN callers; the
	// middleware passes each request's. (A stopped fake clock keeps the
	// output fixed; drop the option in real code.)
	l, err := keyed.NewLimits(free, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		panic(err)
	}
	h := admithttp.Middleware(l,
		admithttp.WithKey(apiKey),
		admithttp.WithLimits(tier),
	)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	send := func(path, key string) {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		r.Header.Set("X-Tier", "paid") // written by the client: read by nobody
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if key == "" {
			key = "(no key)"
		}
		fmt.Println(w.Code, path, key)
		for _, f := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := w.Header().Get(f); v != "" {
				fmt.Printf("  %s: %s\n", f, v)
			}
		}
	}
	for range 3 {
		send("/", "alice")
	}
	send("/", "bob")
	send("/", "mallory")
	send("/", "")
	send("/healthz", "")
	// Output:
	// 200 / alice
	//   RateLimit-Policy: "burst";q=2;w=2, "daily";q=1000;w=86400
	//   RateLimit: "burst";r=1;t=87
	// 200 / alice
	//   RateLimit-Policy: "burst";q=2;w=2, "daily";q=1000;w=86400
	//   RateLimit: "burst";r=0;t=173
	// 429 / alice
	//   RateLimit-Policy: "burst";q=2;w=2, "daily";q=1000;w=86400
	//   RateLimit: "burst";r=0;t=173
	//   Retry-After: 1
	// 200 / bob
	//   RateLimit-Policy: "burst";q=100;w=2, "daily";q=100000;w=86400
	//   RateLimit: "burst";r=99;t=1
	// 403 / mallory
	// 400 / (no key)
	// 200 /healthz (no key)
}

// Burst + daily: a limiter that lists its limits (LimitLister, as
// keyed.NewLimits's does) gets them all in RateLimit-Policy without
// WithLimits, and RateLimit names the one that decided: the burst while
// it runs out first, the day's quota once that is the scarcer.
func ExampleLimitLister() {
	clk := buckettest.NewFakeClock(0) // a fake clock keeps the output fixed
	// Bursts of up to 10 at 1 a second, and 27 a day (one every 3200 s).
	l, err := keyed.NewLimits([]admit.Limit{
		admit.Per(time.Second, 1).WithBurst(10).Named("burst"),
		admit.Per(24*time.Hour, 27).Named("daily"),
	}, admit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	h := admithttp.Middleware(l, admithttp.WithCost(func(r *http.Request) int64 {
		if r.URL.Path == "/export" {
			return 10 // an expensive call
		}
		return 1
	}))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for i, path := range []string{"/export", "/export", "/export", "/"} {
		if i > 0 {
			clk.Advance(10 * time.Second) // the burst refills
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(w.Code, path)
		if i == 0 {
			fmt.Println("  RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
		}
		fmt.Println("  RateLimit:", w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Println("  Retry-After:", ra)
		}
	}
	// Output:
	// 200 /export
	//   RateLimit-Policy: "burst";q=10;w=10, "daily";q=27;w=86400
	//   RateLimit: "burst";r=0;t=32000
	// 200 /export
	//   RateLimit: "burst";r=0;t=63990
	// 429 /export
	//   RateLimit: "daily";r=7;t=63980
	//   Retry-After: 9580
	// 200 /
	//   RateLimit: "daily";r=6;t=67170
}
