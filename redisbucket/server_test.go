package redisbucket_test

import (
	"bufio"
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/admit-go/admit/redisbucket/redistest"
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

// countGoroutines counts the goroutines that a Redis client or this module
// holds: those whose stack runs through go-redis, rueidis or redisbucket
// outside this package's test code. A pile-up while Redis is down would be
// there; the test's own workers, and short-lived runtime goroutines (a
// context's deadline timer firing, say, which a loaded machine can leave
// alive for a moment), are not.
func countGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "_test.go") {
			continue // a test goroutine: a worker, or the test itself
		}
		if strings.Contains(g, "github.com/redis/") || strings.Contains(g, "admit/redisbucket") {
			count++
		}
	}
	return count
}
