package redisbucket_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

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
