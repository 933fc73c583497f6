package redisbucket_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
	"github.com/admit-go/admit/redisbucket/redistest"
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
	forKeys(t, keys, func(key string, k int) error {
		// Key k takes k%capacity+1 tokens, one at a time, then asks for
		// more than are left.
		take := int64(k%capacity + 1)
		if err := takeEach(l, key, take, capacity, ""); err != nil {
			return err
		}
		d, err := l.AllowN(ctx, key, capacity-take+1)
		if err != nil || d.Allowed || d.Remaining != capacity-take ||
			d.RetryAfter <= 999*time.Second || d.RetryAfter > 1000*time.Second {
			return fmt.Errorf("%s over the balance: %+v, %v", key, d, err)
		}
		return nil
	})
	onEveryMaster(t, c, keys)
}

// forKeys runs f for keys user-0 … user-(keys−1) on a goroutine each and
// reports their errors.
func forKeys(t *testing.T, keys int, f func(key string, k int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	for k := range keys {
		wg.Go(func() {
			if err := f(fmt.Sprintf("user-%d", k), k); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// takeEach takes take tokens from key one at a time, each allowed with
// capacity−i left, decided by the limit named policy.
func takeEach(l *redisbucket.Limiter, key string, take, capacity int64, policy string) error {
	for i := int64(1); i <= take; i++ {
		d, err := l.AllowN(context.Background(), key, 1)
		if err != nil || !d.Allowed || d.Remaining != capacity-i || d.Policy != policy {
			return fmt.Errorf("%s take %d: %+v, %v", key, i, d, err)
		}
	}
	return nil
}

// onEveryMaster checks that every master holds at least a tenth of keys.
func onEveryMaster(t *testing.T, c *redis.ClusterClient, keys int64) {
	t.Helper()
	err := c.ForEachMaster(context.Background(), func(ctx context.Context, n *redis.Client) error {
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

// Several limits on a three-master Cluster: each key's limits are records
// on its one Redis key, so no call is CROSSSLOT, keys spread over every
// master, and every key's decisions are exact, through NewLimits' AllowN and
// AllowLimits alike.
func TestClusterPolicy(t *testing.T) {
	cl := sharedCluster(t)
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	defer c.Close()
	burst, daily := admit.Limit{Name: "burst", Capacity: 4, Rate: 0.001}, admit.Limit{Name: "daily", Capacity: 6, Rate: 0.001}
	l, err := redisbucket.NewLimits(c, []admit.Limit{burst, daily}, redisbucket.WithPrefix("clpol:"), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	const keys = 300
	forKeys(t, keys, func(key string, k int) error {
		// Key k takes k%4+1 tokens from both, one at a time; then daily
		// alone gives what it has left; then both deny.
		take := int64(k%4 + 1)
		if err := takeEach(l, key, take, 4, "burst"); err != nil {
			return err
		}
		d, err := l.AllowLimits(ctx, key, 6-take, daily)
		if err != nil || !d.Allowed || d.Remaining != 0 || d.Policy != "daily" {
			return fmt.Errorf("%s daily's rest: %+v, %v", key, d, err)
		}
		// Both refilled alike since their first write: when both are empty
		// they tie, and the first, burst, decides.
		want := "daily"
		if take == 4 {
			want = "burst"
		}
		d, err = l.AllowN(ctx, key, 1)
		if err != nil || d.Allowed || d.Remaining != 0 || d.Policy != want {
			return fmt.Errorf("%s past daily: %+v, %v", key, d, err)
		}
		return nil
	})
	onEveryMaster(t, c, keys)
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

// Keys that hold hash-tag braces themselves, binary bytes, nothing, or
// more than MaxKeyBytes, with empty Names and Names holding braces and colons, through AllowLimits
// on a Cluster: each key is its own bucket per Name (two keys sharing a
// tag share a slot, never a bucket), all or nothing across limits, and a
// SCRIPT FLUSH on every master between calls changes nothing (NOSCRIPT,
// then EVAL, on each key's own node).
func TestClusterOddKeys(t *testing.T) {
	cl := sharedCluster(t)
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	defer c.Close()
	l, err := redisbucket.New(c, 1, 0, redisbucket.WithPrefix(uniquePrefix("cl:odd:")), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"", "{", "}", "{}", "}{x}", "{t}a", "{t}b", "t", "\x00{\xff}\r\n",
		strings.Repeat("{", redisbucket.MaxKeyBytes), strings.Repeat("{t}", 30)}
	limits := []admit.Limit{{Name: "", Capacity: 2}, {Name: "a:b}", Capacity: 3}, {Name: "9:{x", Capacity: 5}}
	expect := func(key string, n int64, lims []admit.Limit, allowed bool, remaining int64, policy string) {
		t.Helper()
		d, err := l.AllowLimits(ctx, key, n, lims...)
		if err != nil || d.Allowed != allowed || d.Remaining != remaining || d.Policy != policy {
			t.Fatalf("key %q, n=%d: %+v, %v; want allowed %v, %d left, policy %q", key, n, d, err, allowed, remaining, policy)
		}
	}
	for _, key := range keys {
		expect(key, 1, limits, true, 1, "")
		expect(key, 1, limits, true, 0, "")
		expect(key, 1, limits, false, 0, "") // all or nothing: the others keep 1 and 3
	}
	if err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		expect(key, 1, limits[1:], true, 0, "a:b}")
		expect(key, 1, limits[1:], false, 0, "a:b}")
		expect(key, 0, limits[2:], true, 2, "9:{x")
	}
}

// lossyConn is a connection whose next read, once armed, takes the
// server's reply and loses it with the connection: the script ran, the
// client saw the connection end.
type lossyConn struct {
	net.Conn
	armed *atomic.Bool
}

func (c *lossyConn) Read(b []byte) (int, error) {
	if c.armed.CompareAndSwap(true, false) {
		_, _ = c.Conn.Read(b) // the reply, lost
		c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}

// TestLostReplyTakesOnce on a Cluster: a ClusterClient retries a command
// whose connection ended, on the same node and then another, so a lost
// reply must not send the script again there either.
func TestClusterLostReplyTakesOnce(t *testing.T) {
	cl := sharedCluster(t)
	ctx := context.Background()
	var armed atomic.Bool
	var d net.Dialer
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &lossyConn{Conn: conn, armed: &armed}, nil
		}})
	defer c.Close()
	prefix := uniquePrefix("cl:lost:")
	l, err := redisbucket.New(c, 3, 0, redisbucket.WithPrefix(prefix), redisbucket.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	limits := []admit.Limit{{Name: "burst", Capacity: 3}, {Name: "day", Capacity: 5}}
	// The key's node connected and its script loaded, so that the next
	// read is the decision's reply.
	if _, err := l.AllowLimits(ctx, "k", 0, limits...); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	dec, err := l.AllowLimits(ctx, "k", 1, limits...)
	if !errors.Is(err, admit.ErrUnavailable) || dec.Allowed {
		t.Errorf("reply lost: %+v, %v; want denied (fail closed) with ErrUnavailable", dec, err)
	}
	check, err := redisbucket.New(c, 3, 0, redisbucket.WithPrefix(prefix), redisbucket.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p, err := check.AllowLimits(ctx, "k", 0, limits...)
	if err != nil {
		t.Fatal(err)
	}
	if p.Remaining != 2 {
		t.Errorf("after one request of 1 token (reply lost): %d of 3 left, want 2: the script ran %d times", p.Remaining, 3-p.Remaining)
	}
}
