package redistest_test

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/admit-go/admit/redisbucket/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ping(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err()
}

// TestServer walks one server through the outages tests stage: frozen and
// thawed, killed and restarted on its address.
func TestServer(t *testing.T) {
	s := redistest.New(t)
	if err := ping(s.Addr); err != nil {
		t.Fatalf("PING after New: %v", err)
	}
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr); err == nil {
		t.Fatal("a frozen server answered PING")
	}
	if err := s.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr); err != nil {
		t.Fatalf("PING after SIGCONT: %v", err)
	}
	s.Stop()
	if err := ping(s.Addr); err == nil {
		t.Fatal("a stopped server answered PING")
	}
	s.Stop() // a second Stop does nothing
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

// TestFreeAddr: nothing answers on the address FreeAddr returns.
func TestFreeAddr(t *testing.T) {
	addr, err := redistest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(addr); err == nil {
		t.Fatal("something answered on FreeAddr's address")
	}
}

// TestCluster: every node of a started Cluster serves its slots.
func TestCluster(t *testing.T) {
	cl := redistest.NewCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer c.Close()
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := c.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	var nodes atomic.Int32 // ForEachMaster calls fn on each master concurrently
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if n > 0 {
			nodes.Add(1)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := nodes.Load(); n < 2 {
		t.Fatalf("keys on %d masters: the slots are not split", n)
	}
}
