package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket/redistest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/redisstore"
	"github.com/admit-go/admit/rls/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

var (
	tmp     string
	single  *redistest.Server
	cluster *redistest.Cluster
	prefix  atomic.Int64
)

func TestMain(m *testing.M) {
	var err error
	tmp, err = os.MkdirTemp("", "redisstore")
	if err != nil {
		panic(err)
	}
	code := func() int {
		if single, err = redistest.Start(tmp); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer single.Stop()
		if cluster, err = redistest.StartCluster(tmp); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cluster.Stop()
		return m.Run()
	}()
	os.RemoveAll(tmp)
	os.Exit(code)
}

func newPrefix() string { return fmt.Sprintf("t%d:", prefix.Add(1)) }

func singleStore(t *testing.T) rls.Store {
	s, _, _ := singleStoreOf(t)
	return s
}

// singleStoreOf is a store on the test's single Redis, with its client and
// key prefix, for tests that read or write its keys.
func singleStoreOf(t testing.TB) (*redisstore.Store, *redis.Client, string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: single.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	p := newPrefix()
	s, err := redisstore.New(c, redisstore.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	return s, c, p
}

func clusterStore(t *testing.T) rls.Store {
	s, _, _ := splitStore(t)
	return s
}

// splitStore is a store on the test Cluster, with its client and key
// prefix, for tests that place keys on masters (otherMaster).
func splitStore(t testing.TB) (*redisstore.Store, *redis.ClusterClient, string) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	pfx := newPrefix()
	s, err := redisstore.New(c, redisstore.WithPrefix(pfx))
	if err != nil {
		t.Fatal(err)
	}
	return s, c, pfx
}

// otherMaster returns a key on another master than k's on the Cluster.
func otherMaster(t testing.TB, c *redis.ClusterClient, pfx, k string) string {
	t.Helper()
	ctx := context.Background()
	mk, err := c.MasterForKey(ctx, pfx+k)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		cand := fmt.Sprint(k, "-o", i)
		mj, err := c.MasterForKey(ctx, pfx+cand)
		if err != nil {
			t.Fatal(err)
		}
		if mj.Options().Addr != mk.Options().Addr {
			return cand
		}
	}
	t.Fatal("no key on another master")
	return ""
}

func rueidisStore(addrs ...string) func(t *testing.T) rls.Store {
	return func(t *testing.T) rls.Store {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s, err := redisstore.NewRueidis(c, redisstore.WithPrefix(newPrefix()))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func TestConformanceSingle(t *testing.T) { storetest.Run(t, singleStore) }

func TestConformanceRueidisSingle(t *testing.T) { storetest.Run(t, rueidisStore(single.Addr)) }

func TestConformanceRueidisCluster(t *testing.T) { storetest.Run(t, rueidisStore(cluster.Addrs()...)) }

// TestConformanceCluster runs the suite on three masters; the suite's keys
// hash to different slots, so requests span nodes and take the split path
// (each key decided alone, takes given back on a refusal).
func TestConformanceCluster(t *testing.T) { storetest.Run(t, clusterStore) }

// TestClusterSpreads checks that the suite's kind of keys do span masters,
// so the cluster conformance run tests the split path.
func TestClusterSpreads(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	defer c.Close()
	s, err := redisstore.New(c, redisstore.WithPrefix("spread:"))
	if err != nil {
		t.Fatal(err)
	}
	res := make([]rls.Result, 1)
	for i := range 60 {
		h := rls.Hit{Key: fmt.Sprint("k", i), Capacity: 5, Count: 1, Period: time.Hour, N: 1}
		if _, err := s.Decide(context.Background(), []rls.Hit{h}, res); err != nil {
			t.Fatal(err)
		}
	}
	var masters atomic.Int64
	err = c.ForEachMaster(context.Background(), func(ctx context.Context, n *redis.Client) error {
		if size, err := n.DBSize(ctx).Result(); err == nil && size > 0 {
			masters.Add(1)
		}
		return nil
	})
	if err != nil || masters.Load() != 3 {
		t.Fatalf("keys on %d masters (%v), want 3", masters.Load(), err)
	}
}

// TestUnavailable: with Redis gone, Decide fails within the timeout with
// an error wrapping admit.ErrUnavailable.
func TestUnavailable(t *testing.T) {
	s0, err := redistest.Start(tmp)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s0.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	s, err := redisstore.New(c, redisstore.WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	h := rls.Hit{Key: "u", Capacity: 5, Count: 1, Period: time.Second, N: 1}
	res := make([]rls.Result, 1)
	if _, err := s.Decide(context.Background(), []rls.Hit{h}, res); err != nil {
		t.Fatal(err)
	}
	s0.Stop()
	_, err = s.Decide(context.Background(), []rls.Hit{h}, res)
	if !errors.Is(err, admit.ErrUnavailable) {
		t.Fatalf("err %v does not wrap ErrUnavailable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Decide(ctx, []rls.Hit{h}, res); err != context.Canceled {
		t.Fatalf("a cancelled context: %v", err)
	}
}

// TestParams: every unit with a burst of a billion at a billion per unit,
// and a burst too large for a slow rate.
func TestParams(t *testing.T) {
	s := singleStore(t)
	res := make([]rls.Result, 1)
	for _, period := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour} {
		h := rls.Hit{Key: "p" + period.String(), Capacity: 1e9, Count: 1e9, Period: period, N: 1e9}
		if ok, err := s.Decide(context.Background(), []rls.Hit{h}, res); err != nil || !ok {
			t.Fatalf("%v: %v %v", period, ok, err)
		}
	}
	h := rls.Hit{Key: "big", Capacity: 1 << 40, Count: 1, Period: 365 * 24 * time.Hour, N: 1}
	if _, err := s.Decide(context.Background(), []rls.Hit{h}, res); !errors.Is(err, admit.ErrInvalidConfig) {
		t.Fatalf("burst 2^40 at 1 a year: %v", err)
	}
}

// TestHungRedis: a frozen server (SIGSTOP) answers nothing; every one of
// many concurrent calls fails within the timeout with ErrUnavailable, and
// no goroutine stays behind once they have.
func TestHungRedis(t *testing.T) {
	t.Run("go-redis", func(t *testing.T) {
		hung(t, func(addr string) (rls.Store, func()) {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 4})
			s, err := redisstore.New(c, redisstore.WithTimeout(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			return s, func() { c.Close() }
		})
	})
	t.Run("rueidis", func(t *testing.T) {
		hung(t, func(addr string) (rls.Store, func()) {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, DisableRetry: true})
			if err != nil {
				t.Fatal(err)
			}
			s, err := redisstore.NewRueidis(c, redisstore.WithTimeout(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			return s, c.Close
		})
	})
}

func hung(t *testing.T, newStore func(addr string) (rls.Store, func())) {
	s0, err := redistest.Start(tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer s0.Stop()
	s, closeStore := newStore(s0.Addr)
	defer closeStore()
	h := rls.Hit{Key: "h", Capacity: 5, Count: 1, Period: time.Second, N: 1}
	if _, err := s.Decide(context.Background(), []rls.Hit{h}, make([]rls.Result, 1)); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	if err := s0.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer s0.Signal(syscall.SIGCONT)
	var wg sync.WaitGroup
	var unavailable atomic.Int64
	for range 50 {
		wg.Go(func() {
			_, err := s.Decide(context.Background(), []rls.Hit{h}, make([]rls.Result, 1))
			if errors.Is(err, admit.ErrUnavailable) {
				unavailable.Add(1)
			}
		})
	}
	wg.Wait()
	if unavailable.Load() != 50 {
		t.Fatalf("%d of 50 calls failed with ErrUnavailable", unavailable.Load())
	}
	// Connections whose command timed out are closed in the background;
	// wait for the count to come back rather than asserting at once.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before the calls", runtime.NumGoroutine(), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRefill runs the script's refill on the server's clock: many
// goroutines on one bucket for over a second never get more than
// capacity + rate × T + 1 (T measured around the whole run), and a bucket
// drained and then left for its reported ResetAfter is full again.
func TestRefill(t *testing.T) {
	for name, newStore := range map[string]func(t *testing.T) rls.Store{
		"single":          singleStore,
		"rueidis-cluster": rueidisStore(cluster.Addrs()...),
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			h := rls.Hit{Key: "refill", Capacity: 10, Count: 20, Period: time.Second, N: 1}
			var admitted atomic.Int64
			start := time.Now()
			end := start.Add(1200 * time.Millisecond)
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					res := make([]rls.Result, 1)
					for time.Now().Before(end) {
						ok, err := s.Decide(context.Background(), []rls.Hit{h}, res)
						if err != nil {
							t.Error(err)
							return
						}
						if ok {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			if bound := 10 + 20*elapsed.Seconds() + 1; float64(admitted.Load()) > bound {
				t.Fatalf("%d admitted in %v, above %v", admitted.Load(), elapsed, bound)
			}
			res := make([]rls.Result, 1)
			h.N = 10
			for {
				ok, err := s.Decide(context.Background(), []rls.Hit{h}, res)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if res[0].Remaining != 0 || res[0].ResetAfter <= 0 {
				t.Fatalf("drained: %+v", res[0])
			}
			time.Sleep(res[0].ResetAfter)
			h.N = 0
			if _, err := s.Decide(context.Background(), []rls.Hit{h}, res); err != nil {
				t.Fatal(err)
			}
			if res[0].Remaining != 10 || res[0].ResetAfter != 0 {
				t.Fatalf("after the reported reset: %+v", res[0])
			}
		})
	}
}

// TestGiveBack: a give-back returns what the take still accounts for. A
// take from a full bucket whose refill has since covered it (and which
// someone drained after) gets nothing back; returning the whole take, as
// the first version did, would leave a token above the bound. A take from
// a bucket with debt to spare gets all of it back.
func TestGiveBack(t *testing.T) {
	s, c, pfx := singleStoreOf(t)
	ctx := context.Background()
	h := rls.Hit{Key: "g", Capacity: 10, Count: 10, Period: time.Hour, N: 1}
	// The take, from a full bucket.
	tk := take(t, s, h)
	// 400 s of refill pass (a token is 360 s): the bucket is full again.
	// Someone drains it, then the give-back arrives.
	ageRedis(t, c, pfx, 400*time.Second)
	drain := h
	drain.N = 10
	res := make([]rls.Result, 1)
	if ok, err := s.Decide(ctx, []rls.Hit{drain}, res); err != nil || !ok || res[0].Remaining != 0 {
		t.Fatalf("drain: %v %+v %v", ok, res[0], err)
	}
	r := giveBack(t, s, h, tk)
	if r.Remaining != 0 {
		t.Fatalf("a take refill has covered was given back: %d remaining", r.Remaining)
	}
	// A take from a bucket two tokens down, given back at once: all of it.
	k := h
	k.Key, k.N = "k", 2
	if _, err := s.Decide(ctx, []rls.Hit{k}, res); err != nil {
		t.Fatal(err)
	}
	k.N = 1
	r, tk, err := s.TakeForTest(ctx, k)
	if err != nil || r.Remaining != 7 {
		t.Fatalf("take: %+v %v", r, err)
	}
	if r, err = s.GiveBackForTest(ctx, k, tk); err != nil || r.Remaining != 8 {
		t.Fatalf("give-back: %+v %v", r, err)
	}
}

// TestRefusalIsNotAnOutage: an error reply that no retry changes, from a
// healthy Redis, is a plain error, never admit.ErrUnavailable, which
// REDIS_FAILURE_MODE_ALLOW turns into an admission: a key holding another
// type or a value this store did not write (WRONGTYPE, the script's own
// error), and CROSSSLOT from a single-node client on a Cluster (admit-rls's
// default REDIS_TYPE=SINGLE), whose error says what to set. A dead Redis is
// still an outage (TestUnavailable).
func TestRefusalIsNotAnOutage(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: single.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	p := newPrefix()
	s, err := redisstore.New(c, redisstore.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	for name, setup := range map[string]func(k string) error{
		"a hash":         func(k string) error { return c.HSet(ctx, k, "a", "b").Err() },
		"garbage string": func(k string) error { return c.Set(ctx, k, "garbage", 0).Err() },
	} {
		key := "refusal-" + strings.ReplaceAll(name, " ", "-")
		if err := setup(p + key); err != nil {
			t.Fatal(err)
		}
		res := make([]rls.Result, 1)
		ok, err := s.Decide(ctx, []rls.Hit{{Key: key, Capacity: 1, Count: 1, Period: time.Hour, N: 1}}, res)
		if ok || err == nil || errors.Is(err, admit.ErrUnavailable) {
			t.Errorf("a key holding %s: admitted %v, %v; want refused with an error that is not admit.ErrUnavailable", name, ok, err)
		}
	}

	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cluster.Addrs()[:1], DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	cs, err := redisstore.NewRueidis(rc, redisstore.WithPrefix(newPrefix()))
	if err != nil {
		t.Fatal(err)
	}
	var hits []rls.Hit
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} { // over several slots
		hits = append(hits, rls.Hit{Key: k, Capacity: 5, Count: 1, Period: time.Second, N: 1})
	}
	ok, err := cs.Decide(ctx, hits, make([]rls.Result, len(hits)))
	if ok || err == nil || errors.Is(err, admit.ErrUnavailable) || !strings.Contains(err.Error(), "REDIS_TYPE=CLUSTER") {
		t.Errorf("a single-node client on a Cluster: admitted %v, %v; want refused, not admit.ErrUnavailable, naming REDIS_TYPE=CLUSTER", ok, err)
	}
}

// TestClusterRefusalStands: on a Cluster, where a request's keys are
// decided on their own nodes, a refusal that Redis gave stands whatever
// else failed: an error would read as an outage, which
// REDIS_FAILURE_MODE_ALLOW admits. A key holding another type beside a
// node past the timeout fails the call with a plain error; a key over its
// limit beside a node past the timeout is refused (OVER_LIMIT, no error).
func TestClusterRefusalStands(t *testing.T) {
	ctx := context.Background()
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	defer admin.Close()
	p := newPrefix()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	s, err := redisstore.New(c, redisstore.WithPrefix(p), redisstore.WithTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	hit := func(k string) rls.Hit { return rls.Hit{Key: k, Capacity: 1, Count: 1, Period: time.Hour, N: 1} }
	// "full" holds no token; "broken" holds a hash.
	if ok, err := s.Decide(ctx, []rls.Hit{hit("full")}, make([]rls.Result, 1)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := admin.HSet(ctx, p+"broken", "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	// other returns a key on another node than key's, and that node.
	other := func(key string) (string, *redis.Client) {
		nk, err := admin.MasterForKey(ctx, p+key)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 64 {
			k := fmt.Sprintf("other%d", i)
			n, err := admin.MasterForKey(ctx, p+k)
			if err != nil {
				t.Fatal(err)
			}
			if n.Options().Addr != nk.Options().Addr {
				return k, n
			}
		}
		t.Fatal("no key on another node")
		return "", nil
	}
	pause := func(n *redis.Client) {
		if err := n.Do(ctx, "CLIENT", "PAUSE", "2000", "ALL").Err(); err != nil {
			t.Fatal(err)
		}
	}
	unpause := func(n *redis.Client) {
		if err := n.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
			t.Fatal(err)
		}
	}

	k, n := other("broken")
	pause(n)
	ok, err := s.Decide(ctx, []rls.Hit{hit("broken"), hit(k)}, make([]rls.Result, 2))
	unpause(n)
	if ok || err == nil || errors.Is(err, admit.ErrUnavailable) {
		t.Errorf("a key of another type beside a node past the timeout: admitted %v, %v; want refused with an error that is not admit.ErrUnavailable", ok, err)
	}

	k, n = other("full")
	pause(n)
	res := make([]rls.Result, 2)
	ok, err = s.Decide(ctx, []rls.Hit{hit("full"), hit(k)}, res)
	unpause(n)
	if ok || err != nil || res[0].OK {
		t.Errorf("a key over its limit beside a node past the timeout: admitted %v, %v, results %+v; want refused, no error", ok, err, res)
	}
}

// TestLostReplyTakesOnce: a connection that ends after Redis ran a
// decision's script, before its reply came back, is an outage, and the
// decision is not sent again: go-redis retries a command on such an error
// (MaxRetries, 3 by default), which for the script would take its tokens a
// second time. The give-back path keeps receipts for its retries; a
// decision has none.
func TestLostReplyTakesOnce(t *testing.T) {
	addr, arm, _ := redistest.ReplyDropper(t, single.Addr)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 1})
	t.Cleanup(func() { c.Close() })
	p := newPrefix()
	s, err := redisstore.New(c, redisstore.WithPrefix(p), redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	h := rls.Hit{Key: "lost", Capacity: 3, Count: 1, Period: time.Hour, N: 0}
	res := make([]rls.Result, 1)
	// The pooled connection open and the script loaded, so that the next
	// reply through the proxy is the decision's.
	if _, err := s.Decide(context.Background(), []rls.Hit{h}, res); err != nil {
		t.Fatal(err)
	}
	arm()
	h.N = 1
	if ok, err := s.Decide(context.Background(), []rls.Hit{h}, res); !errors.Is(err, admit.ErrUnavailable) {
		t.Errorf("reply lost: %v, %v; want ErrUnavailable", ok, err)
	}
	dc := redis.NewClient(&redis.Options{Addr: single.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { dc.Close() })
	direct, err := redisstore.New(dc, redisstore.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	h.N = 0
	if _, err := direct.Decide(context.Background(), []rls.Hit{h}, res); err != nil {
		t.Fatal(err)
	}
	if res[0].Remaining != 2 {
		t.Errorf("after one request of 1 token (reply lost): %d of 3 left, want 2: the script ran %d times", res[0].Remaining, 3-res[0].Remaining)
	}
}

// TestScriptFlushed: a store on go-redis whose script the server no longer
// holds (a restart, a SCRIPT FLUSH, a new Cluster node) sends EVAL after
// EVALSHA's NOSCRIPT and decides, taking once. The store builds its script
// command itself (NoRetry), not through redis.Script.Run, so the fallback
// is its own.
func TestScriptFlushed(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]redis.UniversalClient{
		"single":  redis.NewClient(&redis.Options{Addr: single.Addr, ContextTimeoutEnabled: true}),
		"cluster": redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true}),
	} {
		t.Cleanup(func() { c.Close() })
		t.Run(name, func(t *testing.T) {
			s, err := redisstore.New(c, redisstore.WithPrefix(newPrefix()))
			if err != nil {
				t.Fatal(err)
			}
			h := rls.Hit{Key: "flushed", Capacity: 3, Count: 1, Period: time.Hour, N: 1}
			res := make([]rls.Result, 1)
			if ok, err := s.Decide(ctx, []rls.Hit{h}, res); !ok || err != nil {
				t.Fatalf("first request: %v, %v", ok, err)
			}
			flush := func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() }
			if cc, ok := c.(*redis.ClusterClient); ok {
				err = cc.ForEachShard(ctx, flush)
			} else {
				err = flush(ctx, c.(*redis.Client))
			}
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := s.Decide(ctx, []rls.Hit{h}, res); !ok || err != nil {
				t.Fatalf("after SCRIPT FLUSH: %v, %v; want the decision through EVAL", ok, err)
			}
			if res[0].Remaining != 1 {
				t.Errorf("after two requests of 1 token: %d of 3 left, want 1", res[0].Remaining)
			}
		})
	}
}
