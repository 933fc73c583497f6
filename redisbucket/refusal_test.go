package redisbucket_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/mutexbucket"
	"github.com/admit-go/admit/redisbucket"
	"github.com/redis/rueidis"
)

// named returns k limits of capacity c at rate r, named prefix0, prefix1, ...
func named(prefix string, k int, c int64, r float64) []admit.Limit {
	out := make([]admit.Limit, k)
	for i := range out {
		out[i] = admit.Limit{Name: fmt.Sprint(prefix, i), Capacity: c, Rate: r}
	}
	return out
}

// A call brings at most MaxLimits limits: more are a configuration error,
// found before any round trip, whatever the failure policy. (2 000 limits
// made the script fail, "too many results", and fail open read that as an
// outage and admitted.) MaxLimits itself is decided, all or nothing.
func TestLimitsPerCallBounded(t *testing.T) {
	ctx := context.Background()
	c := client(t, srv)
	over := named("l", redisbucket.MaxLimits+1, 2, 0.001)
	if l, err := redisbucket.NewLimits(c, over); !errors.Is(err, admit.ErrInvalidConfig) || l != nil {
		t.Errorf("NewLimits(%d limits) = %v, %v; want ErrInvalidConfig", len(over), l, err)
	}
	l, err := redisbucket.NewLimits(c, named("l", redisbucket.MaxLimits, 2, 0.001),
		redisbucket.WithPrefix("t:maxlimits:"), redisbucket.WithTimeout(testTimeout), redisbucket.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d, err := l.AllowN(ctx, "k", 1)
		if err != nil || d.Allowed != (i < 2) {
			t.Fatalf("AllowN %d under %d limits: %+v, %v", i, redisbucket.MaxLimits, d, err)
		}
	}
	v, _ := c.Get(ctx, redisbucket.RedisKey(l, "k")).Result()
	if recs, ok := redisbucket.Decode(v); !ok || len(recs) != redisbucket.MaxLimits {
		t.Errorf("stored %d records (parsed %v), want %d", len(recs), ok, redisbucket.MaxLimits)
	}
	for _, k := range []int{redisbucket.MaxLimits + 1, 2000} {
		calls := evalCalls(t, c)
		d, err := l.AllowLimits(ctx, "fresh", 1, named("m", k, 2, 0.001)...)
		if d.Allowed || !errors.Is(err, admit.ErrInvalidConfig) || errors.Is(err, admit.ErrUnavailable) {
			t.Errorf("AllowLimits with %d limits, fail open = %+v, %v; want a denial wrapping ErrInvalidConfig", k, d, err)
		}
		if after := evalCalls(t, c); after != calls {
			t.Errorf("AllowLimits with %d limits ran the script %d times", k, after-calls)
		}
	}
}

// An error reply that is not an outage (here WRONGTYPE: the key holds a
// hash) is a refusal: denied, an error wrapping ErrInvalidConfig and the
// reply, never ErrUnavailable, whatever the failure policy, and the
// fallback is not asked. Redis answered, so the breaker stays closed: the
// next decision on a good key is Redis's. Through go-redis and rueidis, for
// AllowN (the one-limit script path) and AllowLimits (the general path).
func TestScriptErrorIsNotAnOutage(t *testing.T) {
	ctx := context.Background()
	c := client(t, srv)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	fallback := &localKeyed{m: map[string]*mutexbucket.Bucket{}, c: 100}
	policies := map[string]redisbucket.Option{"open": redisbucket.WithFailOpen(), "fallback": redisbucket.WithFallback(fallback)}
	for _, tname := range []string{"go-redis", "rueidis"} {
		for pname, policy := range policies {
			t.Run(tname+"/"+pname, func(t *testing.T) {
				prefix := "t:scripterr:" + tname + ":" + pname
				opts := []redisbucket.Option{redisbucket.WithPrefix(prefix), redisbucket.WithTimeout(testTimeout), policy}
				var l *redisbucket.Limiter
				if tname == "go-redis" {
					l, err = redisbucket.New(c, 2, 0.001, opts...)
				} else {
					l, err = redisbucket.NewRueidis(rc, 2, 0.001, opts...)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := c.HSet(ctx, redisbucket.RedisKey(l, "k"), "f", "v").Err(); err != nil {
					t.Fatal(err)
				}
				calls := []func() (admit.Decision, error){
					func() (admit.Decision, error) { return l.AllowN(ctx, "k", 1) },
					func() (admit.Decision, error) {
						return l.AllowLimits(ctx, "k", 1, admit.Limit{Capacity: 2, Rate: 0.001}, admit.Limit{Name: "b", Capacity: 5, Rate: 1})
					},
				}
				for i, call := range calls {
					for range 5 {
						d, err := call()
						if d.Allowed || !errors.Is(err, admit.ErrInvalidConfig) || errors.Is(err, admit.ErrUnavailable) || !strings.Contains(fmt.Sprint(err), "WRONGTYPE") {
							t.Fatalf("call %d on a hash: %+v, %v; want a denial wrapping ErrInvalidConfig and WRONGTYPE", i, d, err)
						}
					}
				}
				if d, err := l.AllowN(ctx, "good", 1); err != nil || !d.Allowed || d.Remaining != 1 {
					t.Errorf("then a good key: %+v, %v; want Redis's decision", d, err)
				}
			})
		}
	}
	if len(fallback.m) != 0 {
		t.Errorf("the fallback was asked for %d keys", len(fallback.m))
	}
}

// A Redis at maxmemory under noeviction refuses the script's write with an
// OOM reply: Redis cannot decide, an outage for the failure policy (fail
// open admits, with ErrUnavailable), while a denial, which writes nothing,
// is still Redis's.
func TestOutOfMemoryIsAnOutage(t *testing.T) {
	ctx := context.Background()
	s, err := startServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c := client(t, s)
	for _, open := range []bool{false, true} {
		opts := []redisbucket.Option{redisbucket.WithPrefix(fmt.Sprint("oom", open)), redisbucket.WithTimeout(testTimeout)}
		if open {
			opts = append(opts, redisbucket.WithFailOpen())
		}
		l, err := redisbucket.New(c, 1, 0.001, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := l.AllowN(ctx, "drained", 1); err != nil || !d.Allowed {
			t.Fatalf("drain: %+v, %v", d, err)
		}
		if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		d, err := l.AllowN(ctx, "new", 1)
		if d.Allowed != open || !errors.Is(err, admit.ErrUnavailable) || !strings.Contains(fmt.Sprint(err), "OOM") {
			t.Errorf("open=%v: a write refused for memory: %+v, %v; want the policy's decision and ErrUnavailable", open, d, err)
		}
		if d, err := l.AllowN(ctx, "drained", 1); err != nil || d.Allowed {
			t.Errorf("open=%v: a denial needs no write: %+v, %v; want Redis's denial", open, d, err)
		}
		if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// A key may hold records of far more Names than one call brings (calls
// may bring different ones): 70 calls of MaxLimits Names each leave 4 480
// records, all of which the script reads and writes back (it packed them
// with one call, which Lua's stack could not take past about 4 000).
func TestManyNamesOnOneKey(t *testing.T) {
	ctx := context.Background()
	c := client(t, srv)
	l, err := redisbucket.New(c, 1, 1, redisbucket.WithPrefix("t:manynames:"), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	const calls = 70
	for i := range calls {
		limits := named(fmt.Sprintf("c%d-", i), redisbucket.MaxLimits, 3, 0)
		d, err := l.AllowLimits(ctx, "k", 1, limits...)
		if err != nil || !d.Allowed || d.Remaining != 2 {
			t.Fatalf("call %d (%d records held): %+v, %v", i, i*redisbucket.MaxLimits, d, err)
		}
	}
	// The first call's Names again: each holds 2 of 3.
	d, err := l.AllowLimits(ctx, "k", 2, named("c0-", redisbucket.MaxLimits, 3, 0)...)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("the first Names again: %+v, %v", d, err)
	}
	v, err := c.Get(ctx, redisbucket.RedisKey(l, "k")).Result()
	if err != nil {
		t.Fatal(err)
	}
	recs, ok := redisbucket.Decode(v)
	if !ok || len(recs) != calls*redisbucket.MaxLimits {
		t.Fatalf("stored %d records (parsed %v), want %d", len(recs), ok, calls*redisbucket.MaxLimits)
	}
	for _, r := range recs {
		want := int64(1) // a third of capacity 3 taken, in units of per = 1
		if strings.HasPrefix(r.Name, "c0-") {
			want = 3
		}
		if r.D != want {
			t.Fatalf("record %q holds debt %d, want %d", r.Name, r.D, want)
		}
	}
	c.Del(ctx, redisbucket.RedisKey(l, "k"))
}

// A key under the prefix holding a value this package did not write (here
// a megabyte, from another program) is refused, wrapping ErrInvalidConfig;
// the error quotes a bounded head of the value, not all of it: a
// WithOnError function logs it on every request to that key, and %q
// quadruples binary bytes. Both script paths (AllowN's one limit,
// AllowLimits' general code).
func TestMalformedValueErrorBounded(t *testing.T) {
	ctx := context.Background()
	l, c, _ := newLimiter(t, 2, 1)
	big := strings.Repeat("\xff", 1<<20)
	if err := c.Set(ctx, redisbucket.RedisKey(l, "k"), big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	calls := []func() (admit.Decision, error){
		func() (admit.Decision, error) { return l.AllowN(ctx, "k", 1) },
		func() (admit.Decision, error) {
			return l.AllowLimits(ctx, "k", 1, admit.Limit{Capacity: 2, Rate: 1}, admit.Limit{Name: "b", Capacity: 5, Rate: 1})
		},
	}
	for i, call := range calls {
		d, err := call()
		if d.Allowed || !errors.Is(err, admit.ErrInvalidConfig) {
			t.Fatalf("call %d: %+v, %v; want a denial wrapping ErrInvalidConfig", i, d, err)
		}
		if n := len(err.Error()); n > 4096 {
			t.Errorf("call %d: the error is %d bytes long for a value of %d: %.200s…", i, n, len(big), err)
		}
	}
	if v, err := c.Get(ctx, redisbucket.RedisKey(l, "k")).Result(); err != nil || v != big {
		t.Errorf("the value was changed (%d bytes, %v)", len(v), err)
	}
}
