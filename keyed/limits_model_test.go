package keyed_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/internal/refill"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/mutexbucket"
)

// FuzzLimits drives keyed.AllowLimits (and AllowN of a NewLimits limiter of
// all k limits, or of the first alone: then AllowN is the lock-free path,
// and keys are converted to multi-limit entries when a call names the
// others) with k = 1..4 limits over two keys, each call naming a non-empty subset
// of the limits, on a fake clock that only moves forward, beside a model of
// k independent mutexbuckets per key queried all or nothing: the call is
// allowed exactly when every named limit's mutexbucket holds n, an
// admission takes n from each (TryAcquireN true for each), a denial from
// none (TryAcquireN false on a limit that lacks n, nothing else touched).
// A shadow of each bucket, advanced with refill.Params.Refill as
// mutexbucket does, gives the exact Decision: Policy, Limit, Remaining,
// RetryAfter (binary search on Refill) and ResetAfter, by rule 4 of
// admit.PolicyLimiter.
//
// ops is read three bytes at a time: op%3 == 0 advances the clock by
// a<<(b%40) ns; otherwise a call on key (op/3)%2 asks for
// n = a%(least capacity + 2) − 1 from the subset b%2^k of the limits, all
// of them when that is 0 (through AllowN when op%3 == 1).
func FuzzLimits(f *testing.F) {
	f.Add(uint8(2), []byte{3, 2, 7, 10, 30, 1, 2, 1, 1, 1, 5, 0, 2, 3, 2, 30, 1, 2, 1, 1, 1, 0})
	f.Add(uint8(3), []byte{1, 3, 0, 2, 1, 5, 1, 1, 3, 0, 200, 20, 4, 2, 6, 1, 1, 0, 2, 2, 2})
	f.Add(uint8(0), []byte{1, 2, 0, 1, 2, 0, 0, 100, 30, 1, 1, 0, 2, 1, 1})
	f.Add(uint8(7), []byte{1, 1, 1, 2, 2, 2, 4, 3, 3, 0, 5, 33, 1, 3, 1, 2, 4, 2, 0, 9, 36, 1, 2, 0})
	f.Add(uint8(9), []byte{1, 2, 0, 4, 1, 0, 1, 1, 0, 2, 2, 3, 0, 200, 28, 1, 3, 0, 2, 1, 1, 4, 2, 0, 1, 1, 0})
	f.Add(uint8(11), []byte{1, 3, 0, 1, 2, 0, 2, 1, 7, 0, 50, 30, 4, 3, 0, 2, 2, 5, 1, 1, 0, 2, 3, 6})
	f.Fuzz(func(t *testing.T, sel uint8, ops []byte) {
		if len(ops) > 600 {
			ops = ops[:600]
		}
		k := int(sel%4) + 1
		pool := []admit.Limit{
			{Name: "burst", Capacity: 3, Rate: 2},
			{Name: "minute", Capacity: 10, Rate: 1.0 / 3},
			{Name: "day", Capacity: 25, Rate: 0.5},
			{Name: "", Capacity: 5, Rate: 7.3},
		}
		if sel/4%2 == 1 {
			pool[0], pool[3] = pool[3], pool[0]
		}
		limits := pool[:k]
		const t0 = 777
		clk := buckettest.NewFakeClock(t0)
		// primary: the limiter's own limit is the first one alone, so AllowN
		// takes the lock-free path and the first AllowLimits naming another
		// limit converts the key, carrying the first limit's state over.
		primary := sel/8%2 == 1
		own := limits
		if primary {
			own = limits[:1]
		}
		l, err := keyed.NewLimits(own, admit.WithClock(clk))
		require.NoError(t, err)
		ps := make([]refill.Params, k)
		minCap := int64(math.MaxInt64)
		for i, lm := range limits {
			ps[i], err = refill.NewParams(lm.Capacity, lm.Rate)
			require.NoError(t, err)
			minCap = min(minCap, lm.Capacity)
		}
		modelClk := buckettest.NewFakeClock(t0)
		type bucket struct {
			mb           *mutexbucket.Bucket
			tokens, last int64
		}
		model := [2][]bucket{}
		for key := range model {
			for i, lm := range limits {
				mb, err := mutexbucket.New(lm.Capacity, lm.Rate, admit.WithClock(modelClk))
				require.NoError(t, err)
				model[key] = append(model[key], bucket{mb: mb, tokens: ps[i].Cap})
			}
		}
		wait := func(p *refill.Params, bal, at, need int64) time.Duration {
			if bal >= need {
				return 0
			}
			if got, _ := p.Refill(bal, at, refill.Horizon); got < need {
				return time.Duration(math.MaxInt64)
			}
			lo, hi := at, refill.Horizon
			for hi-lo > 1 {
				mid := lo + (hi-lo)/2
				if got, _ := p.Refill(bal, at, mid); got >= need {
					hi = mid
				} else {
					lo = mid
				}
			}
			return time.Duration(hi - at)
		}
		for i := 0; i+2 < len(ops); i += 3 {
			op, a, b := ops[i], ops[i+1], ops[i+2]
			if op%3 == 0 {
				clk.Advance(time.Duration(int64(a) << (b % 40)))
				continue
			}
			key := int(op/3) % 2
			n := int64(a)%(minCap+2) - 1
			mask := int(b) % (1 << k)
			viaAllowN := mask == 0 && op%3 == 1
			var named []int
			for j := range k {
				if (mask == 0 || mask&(1<<j) != 0) && (j == 0 || !viaAllowN || !primary) {
					named = append(named, j)
				}
			}
			call := make([]admit.Limit, len(named))
			for c, j := range named {
				call[c] = limits[j]
			}
			var dec admit.Decision
			if viaAllowN {
				dec, err = l.AllowN(context.Background(), fmt.Sprint("key", key), n)
			} else {
				dec, err = l.AllowLimits(context.Background(), fmt.Sprint("key", key), n, call...)
			}
			if n < 0 {
				require.ErrorIs(t, err, admit.ErrUnsatisfiable, "op %d", i/3)
				require.False(t, dec.Allowed)
				continue
			}
			require.NoError(t, err, "op %d", i/3)
			at := clk.Now() - t0
			modelClk.Set(clk.Now())
			bal := make([]int64, len(named))
			allowed := true
			for c, j := range named {
				bk := &model[key][j]
				bk.tokens, bk.last = ps[j].Refill(bk.tokens, bk.last, at)
				bal[c] = bk.tokens
				allowed = allowed && bal[c] >= ps[j].Units(n)
			}
			exp := admit.Decision{Allowed: allowed, Remaining: math.MaxInt64}
			var longest time.Duration
			first := true
			for c, j := range named {
				bk := &model[key][j]
				need := ps[j].Units(n)
				if allowed {
					require.True(t, bk.mb.TryAcquireN(n), "op %d: mutexbucket %s lacks what the model says it holds", i/3, limits[j].Name)
					bk.tokens -= need
				} else if bal[c] < need {
					require.False(t, bk.mb.TryAcquireN(n), "op %d: mutexbucket %s holds what the model says it lacks", i/3, limits[j].Name)
				}
				if rem := bk.tokens >> ps[j].Shift; rem < exp.Remaining {
					exp.Remaining = rem
					if allowed {
						exp.Policy, exp.Limit = limits[j].Name, limits[j].Capacity
					}
				}
				if bk.tokens < ps[j].Cap {
					exp.ResetAfter = max(exp.ResetAfter, wait(&ps[j], bk.tokens, at, ps[j].Cap))
				}
				if !allowed && bal[c] < need {
					if w := wait(&ps[j], bal[c], at, need); first || w > longest {
						longest, first = w, false
						exp.Policy, exp.Limit = limits[j].Name, limits[j].Capacity
					}
				}
			}
			exp.RetryAfter = longest
			require.Equal(t, exp, dec, "op %d: key %d, n %d, limits %v at %d", i/3, key, n, call, at)
		}
	})
}
