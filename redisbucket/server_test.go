package redisbucket_test

import (
	"bufio"
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/admit-go/admit/redisbucket/internal/redistest"
)

type server = redistest.Server

func startServer(dir string, extra ...string) (*server, error) { return redistest.Start(dir, extra...) }

// client returns a go-redis client for the server that honours context
// deadlines, as redisbucket requires, and closes it when t ends.
func client(t testing.TB, s *server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// serverTime reads the server's clock (TIME) in microseconds.
func serverTime(t testing.TB, c redis.UniversalClient) int64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return tm.UnixMicro()
}

// readLines is for children's output.
func readLines(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func countGoroutines() int { return runtime.NumGoroutine() }
