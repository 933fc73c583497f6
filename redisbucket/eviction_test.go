package redisbucket_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
	"github.com/admit-go/admit/redisbucket/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// constructors builds a limiter through each constructor on a server.
func constructors(t *testing.T, addr string, opts ...redisbucket.Option) map[string]func() (*redisbucket.Limiter, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	return map[string]func() (*redisbucket.Limiter, error){
		"New": func() (*redisbucket.Limiter, error) { return redisbucket.New(c, 3, 0.001, opts...) },
		"NewLimits": func() (*redisbucket.Limiter, error) {
			return redisbucket.NewLimits(c, named("l", 2, 3, 0.001), opts...)
		},
		"NewRueidis": func() (*redisbucket.Limiter, error) { return redisbucket.NewRueidis(rc, 3, 0.001, opts...) },
	}
}

// A Redis that may evict keys would read an evicted bucket as a full one:
// New refuses it, through every constructor, naming the policy, and also
// where CONFIG is refused (read from INFO instead); WithEvictionAccepted
// accepts it.
func TestEvictionPolicyRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, policy string }{
		{"volatile-lru", "volatile-lru"},
		{"allkeys-lru", "allkeys-lru"},
		{"CONFIG renamed", "volatile-lru"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--maxmemory-policy", tc.policy}
			if tc.name == "CONFIG renamed" {
				args = append(args, "--rename-command", "CONFIG", "")
			}
			s := redistest.New(t, args...)
			for name, build := range constructors(t, s.Addr, redisbucket.WithTimeout(testTimeout)) {
				l, err := build()
				if !errors.Is(err, admit.ErrInvalidConfig) || l != nil || !strings.Contains(fmt.Sprint(err), tc.policy) {
					t.Errorf("%s on maxmemory-policy %s: limiter %v, %v; want none and ErrInvalidConfig naming the policy", name, tc.policy, l != nil, err)
				}
			}
			for name, build := range constructors(t, s.Addr, redisbucket.WithTimeout(testTimeout), redisbucket.WithEvictionAccepted()) {
				l, err := build()
				if err != nil {
					t.Fatalf("%s with WithEvictionAccepted: %v", name, err)
				}
				if d, err := l.AllowN(ctx, "k-"+name, 1); err != nil || !d.Allowed {
					t.Errorf("%s with WithEvictionAccepted: %+v, %v", name, d, err)
				}
			}
		})
	}
}

// Where the client may ask neither CONFIG nor INFO (an ACL, as managed
// services set up), New cannot tell the policy and accepts the server, as
// it does one that is down at New; noeviction is accepted.
func TestEvictionPolicyUnknown(t *testing.T) {
	ctx := context.Background()
	s := redistest.New(t, "--maxmemory-policy", "volatile-lru")
	admin := client(t, s)
	if err := admin.Do(ctx, "ACL", "SETUSER", "limiter", "on", ">pw", "~*", "&*", "+@all", "-config", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Username: "limiter", Password: "pw", ContextTimeoutEnabled: true})
	defer c.Close()
	if err := c.ConfigGet(ctx, "maxmemory-policy").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("CONFIG GET as the limited user: %v; want NOPERM", err)
	}
	l, err := redisbucket.New(c, 3, 0.001, redisbucket.WithTimeout(testTimeout))
	if err != nil {
		t.Fatalf("New where the policy cannot be read: %v", err)
	}
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Errorf("AllowN: %+v, %v", d, err)
	}
	for name, build := range constructors(t, srv.Addr, redisbucket.WithTimeout(testTimeout)) {
		if _, err := build(); err != nil {
			t.Errorf("%s on noeviction: %v", name, err)
		}
	}
}

// On a Cluster every node is asked: one master that may evict is enough to
// refuse, and the error names it.
func TestEvictionPolicyCluster(t *testing.T) {
	ctx := context.Background()
	cl := sharedCluster(t)
	node := redis.NewClient(&redis.Options{Addr: cl.Nodes[1].Addr})
	defer node.Close()
	if err := node.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	defer node.ConfigSet(ctx, "maxmemory-policy", "noeviction")
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	defer c.Close()
	l, err := redisbucket.New(c, 3, 0.001, redisbucket.WithTimeout(testTimeout))
	if !errors.Is(err, admit.ErrInvalidConfig) || l != nil || !strings.Contains(fmt.Sprint(err), cl.Nodes[1].Addr) {
		t.Errorf("New on a Cluster with one node on allkeys-lru: limiter %v, %v; want none and ErrInvalidConfig naming %s", l != nil, err, cl.Nodes[1].Addr)
	}
}

// What the refusal prevents, with the risk accepted: under volatile-lru a
// Redis short of memory evicts a drained bucket, which then reads as full,
// and capacity 3 admits 6, with no error.
func TestEvictionReadsAsFull(t *testing.T) {
	ctx := context.Background()
	s := redistest.New(t, "--maxmemory-policy", "volatile-lru")
	c := client(t, s)
	l, err := redisbucket.New(c, 3, 0.001, redisbucket.WithTimeout(testTimeout), redisbucket.WithEvictionAccepted())
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	take := func() {
		for range 3 {
			d, err := l.AllowN(ctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
	}
	take()
	used, err := c.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var mem int64
	for _, line := range strings.Split(used, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			fmt.Sscan(v, &mem)
		}
	}
	if err := c.ConfigSet(ctx, "maxmemory", fmt.Sprint(mem+1<<20)).Err(); err != nil {
		t.Fatal(err)
	}
	filler := strings.Repeat("x", 10<<10)
	key := redisbucket.RedisKey(l, "k")
	for i := 0; c.Exists(ctx, key).Val() == 1; i++ {
		if i == 10_000 {
			t.Fatal("100 MB written and the bucket is still there")
		}
		if err := c.Set(ctx, fmt.Sprint("filler-", i), filler, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	take()
	if admitted != 6 {
		t.Errorf("capacity 3 admitted %d around an eviction; the risk WithEvictionAccepted takes is 6", admitted)
	}
}
