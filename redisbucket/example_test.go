package redisbucket_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/redisbucket"
)

func Example() {
	ctx := context.Background()
	// Any redis.UniversalClient: a *redis.Client, a *redis.ClusterClient,
	// a failover client. It must honour context deadlines. (srv is the
	// server these examples' tests started.)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer client.Close()

	// Was: limiter, err := keyed.New(3, 0.001)
	limiter, err := redisbucket.New(client, 3, 0.001, redisbucket.WithPrefix("example:"), redisbucket.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	for range 4 {
		d, err := limiter.AllowN(ctx, "user-42", 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter > 999*time.Second)
	}
	// Output:
	// true 2 false
	// true 1 false
	// true 0 false
	// false 0 true
}

// While Redis cannot decide, a fallback limiter in this process does; the
// error still says why.
func ExampleWithFallback() {
	ctx := context.Background()
	// Nothing listens on port 1.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	local, err := keyed.New(2, 0.001) // this replica's share of the limit
	if err != nil {
		panic(err)
	}
	limiter, err := redisbucket.New(client, 10, 0.005, redisbucket.WithFallback(local), redisbucket.WithTimeout(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	for range 3 {
		d, err := limiter.AllowN(ctx, "user-42", 1)
		fmt.Println(d.Allowed, errors.Is(err, admit.ErrUnavailable))
	}
	// Output:
	// true true
	// true true
	// false true
}
