package admitgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// perLimit is a test helper, not a policy limiter to copy: an
// admit.PolicyLimiter made of one keyed.Limiter per distinct limit (Name,
// Capacity and Rate), asked in order, so it is NOT all or nothing (a limit
// that admits before a later one denies keeps the tokens it gave) and a
// changed limit starts full instead of carrying the balance over. Its Decisions follow
// admit.PolicyLimiter's rule 4 for the sequences these tests make, which is
// all the interceptor reads. keyed's own AllowLimits replaces it once it is
// on main.
type perLimit struct {
	clk admit.Clock
	mu  sync.Mutex
	m   map[string]*keyed.Limiter
}

func (p *perLimit) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	return p.AllowLimits(ctx, key, n, admit.Limit{Capacity: 1, Rate: 1})
}

func (p *perLimit) AllowLimits(ctx context.Context, key string, n int64, limits ...admit.Limit) (admit.Decision, error) {
	if err := admit.ValidateLimits(limits); err != nil {
		return admit.Decision{}, err
	}
	var out admit.Decision
	for i, lim := range limits {
		p.mu.Lock()
		if p.m == nil {
			p.m = map[string]*keyed.Limiter{}
		}
		id := fmt.Sprintf("%q/%d/%v", lim.Name, lim.Capacity, lim.Rate)
		l := p.m[id]
		if l == nil {
			var err error
			if l, err = keyed.New(lim.Capacity, lim.Rate, admit.WithClock(p.clk)); err != nil {
				p.mu.Unlock()
				return admit.Decision{}, err
			}
			p.m[id] = l
		}
		p.mu.Unlock()
		d, err := l.AllowN(ctx, key, n)
		d.Policy = lim.Name
		if err != nil || !d.Allowed {
			return d, err
		}
		if i == 0 || d.Remaining < out.Remaining {
			out = d
		}
	}
	return out, nil
}

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

func TestWithLimits(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	l := &perLimit{clk: clk}
	s := startServer(t, "tcp", admitgrpc.UnaryServerInterceptor(l, admitgrpc.WithLimits(tiers), admitgrpc.WithPolicyName("api")), nil)
	c := dial(t, s.addr)
	tier := func(name string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-tier", name)
	}
	const free = `"burst";q=2;w=2, "daily";q=5;w=86400`
	steps := []struct {
		advance   time.Duration
		tier      string
		code      codes.Code
		policy    string // ratelimit-policy
		ratelimit string // ratelimit, or its prefix if it ends in "t="
		retry     time.Duration
		quota     string
	}{
		{0, "free", codes.OK, free, `"burst";r=1;t=1`, 0, ""},
		{0, "free", codes.OK, free, `"burst";r=0;t=2`, 0, ""},
		{0, "free", codes.ResourceExhausted, free, `"burst";r=0;t=2`, time.Second, "burst"},
		{10 * time.Second, "free", codes.OK, free, `"burst";r=1;t=1`, 0, ""},
		{0, "free", codes.OK, free, `"burst";r=0;t=2`, 0, ""},
		{10 * time.Second, "free", codes.OK, free, `"daily";r=0;t=`, 0, ""}, // daily has the fewest left
		{0, "paid", codes.OK, `"burst";q=10;w=1`, `"burst";r=9;t=1`, 0, ""},
		{0, "plain", codes.OK, `"api";q=3;w=3`, `"api";r=2;t=1`, 0, ""},
		{0, "internal", codes.OK, "", "", 0, ""},
		{0, "gold", codes.InvalidArgument, "", "", 0, ""},
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		hd, err := check(t, c, tier(st.tier))
		if status.Code(err) != st.code {
			t.Fatalf("step %d (%s): %v; want %v", i, st.tier, err, st.code)
		}
		wantHeader(t, hd, "ratelimit-policy", st.policy)
		if strings.HasSuffix(st.ratelimit, "t=") {
			if got := hd.Get("ratelimit"); len(got) != 1 || !strings.HasPrefix(got[0], st.ratelimit) {
				t.Errorf("step %d: ratelimit %q; want %s…", i, got, st.ratelimit)
			}
		} else {
			wantHeader(t, hd, "ratelimit", st.ratelimit)
		}
		ri, qf := details(t, err)
		if st.retry != 0 && (ri == nil || ri.RetryDelay.AsDuration() != st.retry) {
			t.Errorf("step %d: RetryInfo %v; want %v", i, ri, st.retry)
		}
		if st.quota != "" && (qf == nil || qf.Violations[0].QuotaId != st.quota) {
			t.Errorf("step %d: QuotaFailure %v; want policy %s", i, qf, st.quota)
		}
	}
	if got, want := s.handled.Load(), int64(8); got != want {
		t.Fatalf("the handler ran %d times; want %d", got, want)
	}
}

// TestWithLimitsCostAboveCapacity names the limit the cost can never fit.
func TestWithLimitsCostAboveCapacity(t *testing.T) {
	l := &perLimit{clk: buckettest.NewFakeClock(0)}
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
