package redisbucket_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
	"github.com/admit-go/admit/redisbucket/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var (
	clusterOnce sync.Once
	sharedCl    *redistest.Cluster
	clusterErr  error
)

func sharedCluster(t *testing.T) *redistest.Cluster {
	t.Helper()
	clusterOnce.Do(func() { sharedCl, clusterErr = redistest.StartCluster(tmpDir) })
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return sharedCl
}

func stopSharedCluster() {
	if sharedCl != nil {
		sharedCl.Stop()
	}
}

// A three-master Cluster: keys spread over every master (no hash tag pulls
// them together), and every key's decisions are those of its own bucket.
func TestCluster(t *testing.T) {
	cl := sharedCluster(t)
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	defer c.Close()
	const capacity = 4
	l, err := redisbucket.New(c, capacity, 0.001, redisbucket.WithPrefix("cl:"), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	const keys = 300
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("user-%d", k)
			// Key k takes k%capacity+1 tokens, one at a time, then asks for
			// more than are left.
			take := int64(k%capacity + 1)
			for i := int64(1); i <= take; i++ {
				d, err := l.AllowN(ctx, key, 1)
				if err != nil || !d.Allowed || d.Remaining != capacity-i {
					errs <- fmt.Errorf("%s take %d: %+v, %v", key, i, d, err)
					return
				}
			}
			d, err := l.AllowN(ctx, key, capacity-take+1)
			if err != nil || d.Allowed || d.Remaining != capacity-take ||
				d.RetryAfter <= 999*time.Second || d.RetryAfter > 1000*time.Second {
				errs <- fmt.Errorf("%s over the balance: %+v, %v", key, d, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Every master holds some of the keys.
	err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		size, err := n.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		t.Logf("master %s holds %d keys", n.Options().Addr, size)
		if size < keys/10 {
			return fmt.Errorf("master %s holds %d of %d keys", n.Options().Addr, size, keys)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// A frozen Cluster master does not hold decisions past the timeout on
// fresh clients (whose routing tables are cold): each decision returns
// within the timeout, plus slack for a loaded machine, decided by a live
// master or by the policy. go-redis looks a command up in COMMAND's table
// on a context of its own with a 5 s timeout unless the command carries its
// step count; a client that asked the frozen node first stalled 5 s.
func TestClusterFrozenMaster(t *testing.T) {
	cl, err := redistest.StartCluster(tmpDir)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	ctx := context.Background()
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	defer admin.Close()
	frozen := cl.Nodes[0]
	// Keys owned by live masters.
	var live []string
	for i := 0; len(live) < 8; i++ {
		key := fmt.Sprintf("frozen:k%d", i)
		m, err := admin.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr != frozen.Addr {
			live = append(live, key)
		}
	}
	if err := frozen.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer frozen.Signal(syscall.SIGCONT)
	const timeout = 200 * time.Millisecond
	const clients = 12
	var wg sync.WaitGroup
	var mu sync.Mutex
	var slowest time.Duration
	decided := 0
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
			defer c.Close()
			l, err := redisbucket.New(c, 10, 1, redisbucket.WithPrefix("frozen:"), redisbucket.WithTimeout(timeout))
			if err != nil {
				t.Error(err)
				return
			}
			for j := range 3 {
				start := time.Now()
				d, err := l.AllowN(ctx, live[(i+j)%len(live)], 1)
				took := time.Since(start)
				mu.Lock()
				slowest = max(slowest, took)
				if err == nil {
					decided++
				} else if !errors.Is(err, admit.ErrUnavailable) || d.Allowed {
					t.Errorf("client %d: %+v, %v", i, d, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of %d decisions made by live masters; slowest %v with a %v timeout", decided, 3*clients, slowest, timeout)
	if slowest > timeout+time.Second {
		t.Errorf("a decision took %v with a %v timeout", slowest, timeout)
	}
}
