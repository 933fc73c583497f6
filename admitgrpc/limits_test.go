package admitgrpc_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/keyedtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

var errUnknownTier = errors.New("unknown tier")

// tiers chooses a call's limits from its x-tier metadata.
func tiers(ctx context.Context, _ string) ([]admit.Limit, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	switch t := md.Get("x-tier"); {
	case len(t) == 0 || t[0] == "free":
		return []admit.Limit{admit.Per(2*time.Second, 2).Named("burst"), admit.Per(24*time.Hour, 5).Named("daily")}, nil
	case t[0] == "paid":
		return []admit.Limit{admit.Per(time.Second, 10).Named("burst")}, nil
	case t[0] == "plain":
		return []admit.Limit{{Capacity: 3, Rate: 1}}, nil // unnamed: WithPolicyName's name
	case t[0] == "internal":
		return nil, nil // not limited
	}
	return nil, errUnknownTier
}

// TestWithLimits decides each tier's calls with keyed's AllowLimits, all or
// nothing; the tier is also the key, so the tiers do not share buckets.
func TestWithLimits(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	l, err := keyed.New(1, 1, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithLimits(tiers),
		admitgrpc.WithKey(admitgrpc.KeyByMetadata("x-tier")), admitgrpc.WithPolicyName("api")), nil)
	c := dial(t, s.addr)
	tier := func(name string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-tier", name)
	}
	// free: burst 2 at 1/s, daily 5 a day (1 per 17280 s). ResetAfter is
	// until every limit is full, so the daily limit sets t, which the
	// checks below bound from below: ratelimit's t is never early.
	const free = `"burst";q=2;w=2, "daily";q=5;w=86400`
	steps := []struct {
		advance   time.Duration
		tier      string
		code      codes.Code
		policy    string // ratelimit-policy
		ratelimit string // ratelimit, or its prefix if it ends in "t="
		quota     string
	}{
		{0, "free", codes.OK, free, `"burst";r=1;t=`, ""}, // t: 17280 s, or 1 more where keyed rounds the daily rate's wait up
		{0, "free", codes.OK, free, `"burst";r=0;t=`, ""},
		{0, "free", codes.ResourceExhausted, free, `"burst";r=0;t=`, "burst"}, // burst needs 1 s, daily has 3
		{10 * time.Second, "free", codes.OK, free, `"burst";r=1;t=`, ""},
		{0, "free", codes.OK, free, `"burst";r=0;t=`, ""},
		{10 * time.Second, "free", codes.OK, free, `"daily";r=0;t=`, ""},      // daily has the fewest left
		{0, "free", codes.ResourceExhausted, free, `"daily";r=0;t=`, "daily"}, // burst has 1, daily needs hours
		{0, "paid", codes.OK, `"burst";q=10;w=1`, `"burst";r=9;t=1`, ""},
		{0, "plain", codes.OK, `"api";q=3;w=3`, `"api";r=2;t=1`, ""},
		{0, "internal", codes.OK, "", "", ""},
		{0, "gold", codes.InvalidArgument, "", "", ""},
	}
	var lastRetry time.Duration
	for i, st := range steps {
		clk.Advance(st.advance)
		hd, err := check(t, c, tier(st.tier))
		if status.Code(err) != st.code {
			t.Fatalf("step %d (%s): %v; want %v", i, st.tier, err, st.code)
		}
		wantHeader(t, hd, "ratelimit-policy", st.policy)
		if strings.HasSuffix(st.ratelimit, "t=") {
			got := hd.Get("ratelimit")
			if len(got) != 1 || !strings.HasPrefix(got[0], st.ratelimit) {
				t.Errorf("step %d: ratelimit %q; want %s…", i, got, st.ratelimit)
			} else if tier := st.tier; tier == "free" && i < 3 {
				full := []int64{17280, 34560, 34560}[i]
				if secs, err := strconv.ParseInt(got[0][len(st.ratelimit):], 10, 64); err != nil || secs < full || secs > full+1 {
					t.Errorf("step %d: ratelimit %q; want t=%d (or %d)", i, got, full, full+1)
				}
			}
		} else {
			wantHeader(t, hd, "ratelimit", st.ratelimit)
		}
		ri, qf := details(t, err)
		if st.quota != "" {
			if ri == nil || qf == nil || qf.Violations[0].QuotaId != st.quota {
				t.Fatalf("step %d: RetryInfo %v, QuotaFailure %v; want both, for policy %s", i, ri, qf, st.quota)
			}
			lastRetry = ri.RetryDelay.AsDuration()
		}
	}
	if got, want := s.handled.Load(), int64(8); got != want {
		t.Fatalf("the handler ran %d times; want %d", got, want)
	}
	// The daily denial's RetryDelay is never early: a nanosecond before
	// it the free tier is still denied, at it admitted.
	if lastRetry < time.Hour {
		t.Fatalf("daily RetryDelay %v; want hours", lastRetry)
	}
	clk.Advance(lastRetry - 1)
	if _, err := check(t, c, tier("free")); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("1ns before the daily RetryDelay: %v; want ResourceExhausted", err)
	}
	clk.Advance(1)
	if _, err := check(t, c, tier("free")); err != nil {
		t.Fatalf("at the daily RetryDelay: %v; want admitted", err)
	}
}

// TestWithLimitsInvalid: limits the server cannot enforce are its own bug,
// codes.Internal, never served (not even with WithFailOpen).
func TestWithLimitsInvalid(t *testing.T) {
	l, err := keyed.New(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	bad := func(context.Context, string) ([]admit.Limit, error) {
		return []admit.Limit{{Name: "a", Capacity: 1, Rate: 1}, {Name: "a", Capacity: 2, Rate: 1}}, nil
	}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithLimits(bad), admitgrpc.WithFailOpen()), nil)
	if _, err := check(t, dial(t, s.addr), context.Background()); status.Code(err) != codes.Internal {
		t.Fatalf("two limits named a: %v; want Internal", err)
	}
	if s.handled.Load() != 0 {
		t.Fatal("the handler ran")
	}
}

// TestLimitLister: a keyed.Limiter from NewLimits lists its limits in
// ratelimit-policy without WithLimits, and ratelimit names the deciding one.
func TestLimitLister(t *testing.T) {
	l, err := keyed.NewLimits([]admit.Limit{admit.Per(time.Second, 2).Named("burst"), admit.Per(time.Hour, 3).Named("hourly")},
		admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l), nil)
	c := dial(t, s.addr)
	const policy = `"burst";q=2;w=1, "hourly";q=3;w=3600`
	for i, want := range []string{`"burst";r=1;t=1200`, `"burst";r=0;t=2400`} {
		hd, err := check(t, c, context.Background())
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		wantHeader(t, hd, "ratelimit-policy", policy)
		wantHeader(t, hd, "ratelimit", want)
	}
	hd, err := check(t, c, context.Background())
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v", err)
	}
	if _, qf := details(t, err); qf == nil || qf.Violations[0].QuotaId != "burst" {
		t.Fatalf("QuotaFailure %v; want burst", qf)
	}
	wantHeader(t, hd, "ratelimit-policy", policy)
	wantHeader(t, hd, "retry-after", "1")
}

// TestWithLimitsCostAboveCapacity names the limit the cost can never fit.
func TestWithLimitsCostAboveCapacity(t *testing.T) {
	l, err := keyed.New(1, 1, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithLimits(tiers),
		admitgrpc.WithCost(func(context.Context, string) int64 { return 3 })), nil)
	hd, err := check(t, dial(t, s.addr), context.Background()) // free: burst holds 2
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("%v; want ResourceExhausted", err)
	}
	ri, qf := details(t, err)
	if ri != nil || qf == nil || qf.Violations[0].QuotaId != "burst" || qf.Violations[0].QuotaValue != 2 {
		t.Fatalf("RetryInfo %v, QuotaFailure %v; want no RetryInfo and the burst limit of 2", ri, qf)
	}
	wantHeader(t, hd, "ratelimit-policy", `"burst";q=2;w=2, "daily";q=5;w=86400`)
	wantHeader(t, hd, "retry-after", "")
}

// TestExemptNeedsNoKey: the limits are asked for first, as admithttp asks,
// so a call WithLimits exempts (a health probe: no limits) is served
// without the key the key function needs; a limited call without it is
// refused InvalidArgument, and its message says so once, without the
// package's prefix repeated.
func TestExemptNeedsNoKey(t *testing.T) {
	l, err := keyed.New(1, 1, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	var keyCalls atomic.Int64
	keyOf := admitgrpc.KeyByMetadata("x-api-key")
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithLimits(tiers),
		admitgrpc.WithKey(func(ctx context.Context, m string) (string, error) {
			keyCalls.Add(1)
			return keyOf(ctx, m)
		})), nil)
	c := dial(t, s.addr)
	probe := metadata.AppendToOutgoingContext(context.Background(), "x-tier", "internal")
	for range 3 {
		if _, err := check(t, c, probe); err != nil {
			t.Fatalf("exempt call without a key: %v; want it served", err)
		}
	}
	if got := keyCalls.Load(); got != 0 {
		t.Fatalf("the key function ran %d times for exempt calls; want 0", got)
	}
	_, err = check(t, c, context.Background()) // free tier, no key
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("limited call without a key: %v; want InvalidArgument", err)
	}
	if msg, want := status.Convert(err).Message(), "admitgrpc: cannot identify the client: the call has no x-api-key metadata"; msg != want {
		t.Fatalf("message %q; want %q", msg, want)
	}
	_, err = check(t, c, metadata.AppendToOutgoingContext(context.Background(), "x-tier", "gold", "x-api-key", "k"))
	if msg, want := status.Convert(err).Message(), "admitgrpc: cannot choose the limits: unknown tier"; status.Code(err) != codes.InvalidArgument || msg != want {
		t.Fatalf("unknown tier: %v; want InvalidArgument %q", err, want)
	}
	if got := s.handled.Load(); got != 3 {
		t.Fatalf("the handler ran %d times; want 3", got)
	}
}

// TestUnknownClient: a key or limits function that knows the client is not
// one the server serves says so by wrapping admit.ErrUnknownClient, and the
// call is refused codes.PermissionDenied instead of InvalidArgument.
func TestUnknownClient(t *testing.T) {
	l, err := keyed.New(1, 1, admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	accounts := map[string][]admit.Limit{"k1": {admit.Per(time.Second, 1).Named("burst")}}
	keyOf := admitgrpc.KeyByMetadata("x-api-key")
	byKey := func(ctx context.Context, m string) ([]admit.Limit, error) {
		key, err := keyOf(ctx, m)
		if err != nil {
			return nil, err
		}
		if limits, ok := accounts[key]; ok {
			return limits, nil
		}
		return nil, fmt.Errorf("%w: API key sha256:%.4x", admit.ErrUnknownClient, sha256.Sum256([]byte(key)))
	}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithLimits(byKey), admitgrpc.WithKey(keyOf)), nil)
	c := dial(t, s.addr)
	for _, cs := range []struct {
		md   []string
		code codes.Code
	}{
		{[]string{"x-api-key", "k1"}, codes.OK},
		{[]string{"x-api-key", "k2"}, codes.PermissionDenied},
		{nil, codes.InvalidArgument},
	} {
		_, err := check(t, c, metadata.AppendToOutgoingContext(context.Background(), cs.md...))
		if status.Code(err) != cs.code {
			t.Errorf("metadata %q: %v; want %v", cs.md, err, cs.code)
		}
		// The function's error reaches the client in the status message:
		// the digest of the key, as written above, never the key.
		if msg := status.Convert(err).Message(); cs.code == codes.PermissionDenied && (!strings.Contains(msg, "API key sha256:") || strings.Contains(msg, "k2")) {
			t.Errorf("message %q; want the key's digest and not the key", msg)
		}
	}
	if got := s.handled.Load(); got != 1 {
		t.Fatalf("the handler ran %d times; want 1", got)
	}
}

// TestLimitListerThroughWrapper: the limits (and fill time) of a limiter
// behind a wrapper that only forwards (keyedtest.Wrapper, as admitotel's
// wrapper does) are found down its Unwrap chain.
func TestLimitListerThroughWrapper(t *testing.T) {
	l, err := keyed.NewLimits([]admit.Limit{admit.Per(time.Second, 2).Named("burst"), admit.Per(time.Hour, 3).Named("hourly")},
		admit.WithClock(buckettest.NewFakeClock(0)))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(keyedtest.Wrapper{L: l}), nil)
	hd, err := check(t, dial(t, s.addr), context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantHeader(t, hd, "ratelimit-policy", `"burst";q=2;w=1, "hourly";q=3;w=3600`)
	wantHeader(t, hd, "ratelimit", `"burst";r=1;t=1200`)
}
