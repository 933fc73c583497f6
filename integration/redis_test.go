package integration_test

import (
	"testing"

	"github.com/admit-go/admit/redisbucket/redistest"
	"github.com/redis/go-redis/v9"
)

// startRedis is a client of a real redis-server on loopback, stopped
// when the test ends (and with the test process).
func startRedis(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redistest.New(t).Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// deadRedis is a client of a loopback port nothing listens on: every
// command fails (connection refused).
func deadRedis(t *testing.T) *redis.Client {
	t.Helper()
	addr, err := redistest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}
