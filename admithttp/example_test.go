package admithttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"

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
