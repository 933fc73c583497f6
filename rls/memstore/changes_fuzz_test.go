package memstore_test

import (
	"testing"
	"time"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
	"github.com/stretchr/testify/require"
)

// changes drives a Store from bytes on a fake clock with every operation
// that changes a bucket interleaved: requests of one to three hits, limit
// changes (each key switches between two limits, raised and lowered,
// carried over in refused requests too), debt hits, limits of zero and
// shadow hits. It checks, on every step:
//
//   - the bound: per key and per span in which its limit did not change,
//     the tokens admitted never exceed capacity + rate × T + 1 over any
//     window (a carried balance is at most the new capacity, so a span
//     starts at most full);
//   - all or nothing: a refused request leaves every ordinary key it did
//     not re-limit as it was, and an admitted one takes exactly N from each
//     (keys peeked at the same instant before and after);
//   - a change of limit never adds whole tokens at the instant it applies;
//   - a request with an enforced zero hit that costs anything is refused;
//   - the debt key u, exactly, against a model of its balance (kept as the
//     time it needs to be full again, in nanoseconds, which is exact for
//     its limits, a token every 0.5 s or 1 s): a debt hit holds its cost
//     when the balance does, is charged whatever the request's outcome, down
//     to minus one burst; a change of limit carries the balance over,
//     rounded down to the new limit's units and clamped to ±its capacity,
//     so it never forgives a debt beyond the new limit's own bound; and a
//     request without u leaves it as it was.
func changes(t *testing.T, data []byte) {
	clk := buckettest.NewFakeClock(0)
	s := memstore.New(memstore.WithClock(clk))
	keys := []string{"a", "b", "c", "u"}
	variants := map[string][2]lim{
		"a": {{3, 1, time.Second}, {8, 4, time.Second}},
		"b": {{5, 1, 2 * time.Second}, {2, 1, time.Second}},
		"c": {{1, 1, time.Second}, {10, 10, time.Second}},
		"u": {{4, 2, time.Second}, {6, 1, time.Second}}, // debt
	}
	cur := map[string]int{}
	bounds := map[string]*buckettest.Bound{}
	newBound := func(k string) {
		l := variants[k][cur[k]]
		bounds[k] = buckettest.NewBound(l.capacity, l.rate())
	}
	for _, k := range keys {
		newBound(k)
	}
	hitOf := func(k string, n int64) rls.Hit {
		h := variants[k][cur[k]].hit(k, n)
		h.Debt = k == "u"
		return h
	}
	peekAll := func() map[string]int64 {
		out := map[string]int64{}
		for _, k := range keys[:3] {
			ok, r := decide1(t, s, hitOf(k, 0))
			require.True(t, ok)
			out[k] = r.Remaining
		}
		return out
	}
	// peekU returns the time until u is full again, under its current
	// limit (a check holds nothing in debt, so it is read whatever the
	// outcome).
	peekU := func() time.Duration {
		_, r := decide1(t, s, hitOf("u", 0))
		return r.ResetAfter
	}
	uClamped := false // u is full only by a change's clamp (see uModel)
	for len(data) >= 3 {
		op, mask, nb := data[0], data[1], data[2]
		data = data[3:]
		clk.Advance(time.Duration(op&0x3f) * 41 * time.Millisecond)
		before := peekAll()
		uBefore, uOld := peekU(), variants["u"][cur["u"]]
		changed := map[string]bool{}
		var hits []rls.Hit
		for i, k := range keys {
			if mask&(1<<i) == 0 {
				continue
			}
			if op&0x40 != 0 && nb&(1<<i) != 0 { // this request brings the key's other limit
				cur[k] ^= 1
				changed[k] = true
				newBound(k)
			}
			hits = append(hits, hitOf(k, int64(nb>>(2*i))&3))
			hits[len(hits)-1].Shadow = mask&(0x10<<i) != 0 && k != "u"
		}
		zero := op&0x80 != 0 && mask&0xf0 == 0xf0
		if zero {
			hits = append(hits, rls.Hit{Key: "z", Period: time.Second, N: int64(nb & 1)})
		}
		if len(hits) == 0 {
			continue
		}
		res := make([]rls.Result, len(hits))
		admitted, err := s.Decide(ctx, hits, res)
		require.NoError(t, err)
		if zero && nb&1 == 1 {
			require.False(t, admitted, "an enforced zero limit with a cost refuses")
		}
		after := peekAll()
		now := clk.Now()
		for i, h := range hits {
			if h.Key == "z" {
				continue
			}
			if admitted && res[i].OK {
				require.True(t, bounds[h.Key].Admit(now, h.N), "key %s over capacity + rate × T + 1", h.Key)
			}
			if h.Key == "u" {
				r, ok, cl := uModel(uBefore, uOld, variants["u"][cur["u"]], changed["u"], uClamped, h.N)
				uClamped = cl
				require.Equal(t, ok, res[i].OK, "u: does the balance hold %d? (hits %+v)", h.N, hits)
				require.Equal(t, r, res[i].ResetAfter, "u: charged %d from %v (limit changed: %v); hits %+v, admitted %v", h.N, uBefore, changed["u"], hits, admitted)
				continue
			}
			if changed[h.Key] {
				// A full bucket is the same as none: full under the new
				// limit too. Any other keeps at most its whole tokens.
				old := variants[h.Key][cur[h.Key]^1].capacity
				if before[h.Key] < old {
					require.LessOrEqual(t, after[h.Key], before[h.Key], "a change added whole tokens: %s %d → %d", h.Key, before[h.Key], after[h.Key])
				}
				continue
			}
			want := before[h.Key]
			if admitted && res[i].OK {
				want -= h.N
			}
			require.Equal(t, want, after[h.Key], "key %s: hits %+v admitted %v", h.Key, hits, admitted)
		}
		if mask&(1<<3) == 0 {
			require.Equal(t, uBefore, peekU(), "a request without u changed it")
		}
	}
}

// uModel returns what u's bucket needs to be full again after a debt hit
// of n, and whether its balance held n, from r, what it needed before the
// request under limit old (the balance is the capacity less r's worth of
// refill), and new, the limit of the hit (changed if it differs). Times
// are exact nanoseconds: a token is 0.5 s or 1 s.
//
// clamped says the bucket is full (r = 0) only because a change clamped its
// balance to a smaller capacity: it then carries that balance, the old
// capacity, into the next change, not "full" (a full bucket stays full);
// the model returns whether it still is after the hit.
func uModel(r time.Duration, old, new lim, changed, clamped bool, n int64) (time.Duration, bool, bool) {
	tokO, tokN := old.period/time.Duration(old.count), new.period/time.Duration(new.count)
	capN := time.Duration(new.capacity) * tokN // the new capacity's worth of refill
	if changed && (r != 0 || clamped) {
		// The balance, in tokens, to the new units (a nanosecond of refill
		// each), rounded down, clamped to ±the new capacity; a full bucket
		// stays full.
		bal := time.Duration(old.capacity)*tokO - r
		nb := bal * tokN / tokO
		if (bal*tokN)%tokO != 0 && bal < 0 {
			nb-- // rounded down
		}
		r = capN - min(max(nb, -capN), capN)
		clamped = r == 0
	} else if changed {
		clamped = false
	}
	held := n <= new.capacity && time.Duration(n)*tokN <= capN-r
	r = min(r+time.Duration(n)*tokN, 2*capN)
	return r, held, clamped && r == 0
}

func TestChanges(t *testing.T) { changes(t, noise(7, 3*4000)) }

func FuzzChanges(f *testing.F) {
	f.Add([]byte{0x40, 0x0f, 0xff, 0x41, 0x0f, 0x00, 0xc0, 0xff, 0x01})
	f.Add([]byte{3, 0x08, 0xc0, 0x43, 0x08, 0xc0, 1, 0x08, 0x00, 60, 0x09, 0xff})
	f.Fuzz(changes)
}
