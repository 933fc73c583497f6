package admitotel

import (
	"context"
	"fmt"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/ratelimit"
	"github.com/admit-go/admit/keyed"
)

var (
	_ admit.KeyedLimiter  = (*Limiter)(nil)
	_ admit.PolicyLimiter = (*Limiter)(nil)
	_ admit.Limiter       = (*Bucket)(nil)
)

// Limiter is an admit.KeyedLimiter, and an admit.PolicyLimiter, that counts
// the decisions of the limiter it wraps (see the package doc for the
// instruments). It is safe for concurrent use; build one with Wrap (the
// zero value is not usable).
type Limiter struct {
	ctr Counter // first, so that &w.ctr is w: counting costs no address arithmetic
	l   admit.KeyedLimiter
	pl  admit.PolicyLimiter // l, if it is one
	// k is l when l is a *keyed.Limiter: decided through its Into
	// methods, which write the Decision into this wrapper's own result.
	// Through AllowN the Decision (six fields, too many for registers)
	// would be copied from the call's result to ours, about 10 ns a call
	// on amd64, twice the wrapper's whole budget; the concrete call also
	// lets escape analysis keep the result on the stack.
	k *keyed.Limiter
}

// Wrap returns a Limiter that decides with l and counts each decision. If l,
// or a limiter it wraps as far as Unwrap() admit.KeyedLimiter methods tell
// (a Limiter of this package has one), reports its key table with a Stats
// method returning keyed.Stats (as *keyed.Limiter does), the key
// instruments report it too. The instruments
// are created on the MeterProvider WithMeterProvider names, and their
// callback stays registered for the provider's lifetime: wrap once, at
// start-up. An error from creating them, or an invalid option, is returned
// (options' errors wrap admit.ErrInvalidConfig). Wrap panics if l is nil.
func Wrap(l admit.KeyedLimiter, opts ...Option) (*Limiter, error) {
	if l == nil {
		panic("admitotel: Wrap(nil)")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	w := &Limiter{l: l, ctr: Counter{c: newCounters()}}
	w.pl, _ = l.(admit.PolicyLimiter)
	w.k, _ = l.(*keyed.Limiter)
	// Stats through Unwrap too: a wrapper of keyed (this package's own,
	// one per MeterProvider) still has keyed's table and no backend.
	st, _ := ratelimit.Find[statser](l)
	w.ctr.remote = st == nil
	if _, err := newInstruments(cfg, w.ctr.c, st); err != nil {
		return nil, err
	}
	return w, nil
}

// AllowN decides with the wrapped limiter's AllowN and counts the result.
func (w *Limiter) AllowN(ctx context.Context, key string, n int64) (d admit.Decision, err error) {
	if n == 0 && ratelimit.IsForHeaders(ctx) {
		return w.l.AllowN(ctx, key, n) // a middleware's read for its fields: no decision
	}
	if w.k != nil {
		err = w.k.AllowNInto(&d, key, n)
	} else {
		d, err = w.l.AllowN(ctx, key, n)
	}
	// The usual call, counted here rather than through count and add
	// (neither inlines: two calls more, a quarter of the budget): an
	// answer without a policy name or an error, in this P's own slot.
	if plainAdds && err == nil && d.Policy == "" && n >= 0 {
		r := denied
		if d.Allowed {
			r = allowed
		}
		c := w.ctr.c
		if p := pin(); p < uint(len(c.slots)-1) {
			s := &c.slots[p]
			s.decisions[r]++
			s.tokens[r] = saturate(s.tokens[r], uint64(n))
			unpin()
			return
		}
		unpin()
	}
	w.ctr.count(d.Allowed, d.Policy, n, err)
	return
}

// AllowLimits decides with the wrapped limiter's AllowLimits and counts the
// result under the deciding limit's Name. If the wrapped limiter is not an
// admit.PolicyLimiter, it returns an error wrapping admit.ErrInvalidConfig
// (counted as an error) and decides nothing.
func (w *Limiter) AllowLimits(ctx context.Context, key string, n int64, limits ...admit.Limit) (d admit.Decision, err error) {
	if n == 0 && w.pl != nil && ratelimit.IsForHeaders(ctx) {
		return w.pl.AllowLimits(ctx, key, n, limits...) // a middleware's read for its fields: no decision
	}
	switch {
	case w.k != nil:
		err = w.k.AllowLimitsInto(&d, key, n, limits...)
	case w.pl != nil:
		d, err = w.pl.AllowLimits(ctx, key, n, limits...)
	default:
		w.ctr.c.add(failed, n, false, "")
		return admit.Decision{}, fmt.Errorf("%w: admitotel: the wrapped %T is not an admit.PolicyLimiter", admit.ErrInvalidConfig, w.l)
	}
	w.ctr.count(d.Allowed, d.Policy, n, err)
	return
}

// Unwrap returns the wrapped limiter. admithttp and admitgrpc read it to
// tell whether what the wrapper wraps is an admit.PolicyLimiter, and to
// find its optional methods: the wrapper has no FillTime or Limits of its
// own, so that it neither hides the wrapped limiter's nor claims one the
// wrapped limiter lacks (a FillTime of 0, say, which a middleware would
// read as "never refills").
func (w *Limiter) Unwrap() admit.KeyedLimiter { return w.l }
