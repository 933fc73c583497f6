package admithttp_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
)

// policyKeyed is a test-only admit.PolicyLimiter built from real
// keyed.Limiters, one per distinct Limit (Name, Capacity and Rate), all on
// one clock. It stands in for keyed's own AllowLimits, which is being
// written on another branch: once keyed.NewLimits exists, these tests are
// to run on it instead.
//
// It is all or nothing only because one mutex serializes every call and
// nothing else touches its limiters, and only on a fake clock (it peeks
// every limit, then takes from each; on a moving clock a limit could fill
// between the two). Unlike keyed, a changed Capacity or Rate for a Name is
// a new bucket, not a carried-over balance (PolicyLimiter's rule 3): the
// tests never change a key's limits. Admitting a request it has seen
// before allocates nothing, so the allocation test can count the
// middleware's own.
type policyKeyed struct {
	clk admit.Clock

	mu    sync.Mutex
	by    map[admit.Limit]*keyed.Limiter
	calls int // AllowLimits calls, errors included
	// Scratch for one call, under mu: no allocation per call.
	ls   [16]*keyed.Limiter
	peek [16]admit.Decision
}

func newPolicyKeyed(clk admit.Clock) *policyKeyed {
	return &policyKeyed{clk: clk, by: map[admit.Limit]*keyed.Limiter{}}
}

// Calls returns how many times AllowLimits was called.
func (p *policyKeyed) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// AllowN makes it an admit.KeyedLimiter, which Middleware takes; with no
// limits it is an error, as PolicyLimiter's rule 5 says.
func (p *policyKeyed) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	return p.AllowLimits(ctx, key, n)
}

// AllowLimits decides by PolicyLimiter's rules 1, 4 and 5.
func (p *policyKeyed) AllowLimits(ctx context.Context, key string, n int64, limits ...admit.Limit) (admit.Decision, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if err := admit.ValidateLimits(limits); err != nil {
		return admit.Decision{}, err
	}
	if len(limits) > len(p.ls) {
		return admit.Decision{}, fmt.Errorf("%w: %d limits", admit.ErrInvalidConfig, len(limits))
	}
	for i, l := range limits {
		kl, ok := p.by[l]
		if !ok {
			var err error
			if kl, err = keyed.New(l.Capacity, l.Rate, admit.WithClock(p.clk)); err != nil {
				return admit.Decision{}, err
			}
			p.by[l] = kl
		}
		p.ls[i] = kl
		if n > l.Capacity || n < 0 {
			return admit.Decision{}, fmt.Errorf("%w: cost %d, limit %q holds %d", admit.ErrUnsatisfiable, n, l.Name, l.Capacity)
		}
	}
	ok := true
	for i := range limits {
		d, err := p.ls[i].AllowN(ctx, key, 0)
		if err != nil {
			return admit.Decision{}, err
		}
		p.peek[i] = d
		ok = ok && d.Remaining >= n // whole tokens ≥ n iff the balance ≥ n
	}
	if ok {
		var out admit.Decision
		for i := range limits {
			d, err := p.ls[i].AllowN(ctx, key, n)
			if err != nil || !d.Allowed {
				broken("refused what its peek held", limits[i], d, err)
			}
			if i == 0 || d.Remaining < out.Remaining {
				out.Limit, out.Remaining, out.Policy = d.Limit, d.Remaining, limits[i].Name
			}
			out.ResetAfter = max(out.ResetAfter, d.ResetAfter)
		}
		out.Allowed = true
		return out, nil
	}
	out := admit.Decision{Remaining: p.peek[0].Remaining}
	for i := range limits {
		pk := p.peek[i]
		out.Remaining = min(out.Remaining, pk.Remaining)
		out.ResetAfter = max(out.ResetAfter, pk.ResetAfter)
		if pk.Remaining >= n {
			continue // holds n: needs no wait
		}
		d, err := p.ls[i].AllowN(ctx, key, n) // denied: consumes nothing
		if err != nil || d.Allowed {
			broken("admitted what its peek lacked", limits[i], d, err)
		}
		if d.RetryAfter > out.RetryAfter || out.Limit == 0 {
			out.RetryAfter, out.Limit, out.Policy = d.RetryAfter, d.Limit, limits[i].Name
		}
	}
	return out, nil
}

// broken panics: a keyed.Limiter contradicted its own peek under the
// mutex. (A function of its own, so that d and err are boxed only here and
// not on every call.)
//
//go:noinline
func broken(what string, l admit.Limit, d admit.Decision, err error) {
	panic(fmt.Sprintf("policyKeyed: limit %q %s: %+v, %v", l.Name, what, d, err))
}

// listedKeyed is a policyKeyed with configured limits, as keyed.NewLimits
// returns: AllowN applies them all, and Limits lists them (so it is an
// admithttp.LimitLister).
type listedKeyed struct {
	*policyKeyed
	limits []admit.Limit
}

func (l listedKeyed) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	return l.AllowLimits(ctx, key, n, l.limits...)
}

func (l listedKeyed) Limits() []admit.Limit { return slices.Clone(l.limits) }
