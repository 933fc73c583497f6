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

// A burst and a daily quota on every key, decided together: a request that
// one of them refuses takes from neither. Decision.Policy names the limit
// that decided.
func ExampleNewLimits() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer client.Close()
	burst := admit.Per(time.Minute, 2).Named("burst")
	daily := admit.Per(24*time.Hour, 3).Named("daily")
	limiter, err := redisbucket.NewLimits(client, []admit.Limit{burst, daily}, redisbucket.WithPrefix("example-limits:"), redisbucket.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	for _, n := range []int64{2, 1, 2} {
		d, err := limiter.AllowN(ctx, "user-42", n)
		if err != nil {
			panic(err)
		}
		fmt.Println(n, d.Allowed, d.Policy, d.Remaining)
	}
	// Output:
	// 2 true burst 0
	// 1 false burst 0
	// 2 false daily 0
}

// Limits chosen per call: a tier read from the request. A key that moves
// to another tier keeps its balance, clamped to the new burst.
func ExampleLimiter_AllowLimits() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, err := redisbucket.New(client, 1, 1, redisbucket.WithPrefix("example-tiers:"), redisbucket.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	free := admit.Per(time.Hour, 10).Named("hourly")
	paid := admit.Per(time.Hour, 100).Named("hourly")
	d, _ := limiter.AllowLimits(ctx, "user-42", 4, free)
	fmt.Println(d.Allowed, d.Remaining, d.Limit)
	d, _ = limiter.AllowLimits(ctx, "user-42", 0, paid) // upgraded: the balance carries over
	fmt.Println(d.Allowed, d.Remaining, d.Limit)
	// Output:
	// true 6 10
	// true 6 100
}
