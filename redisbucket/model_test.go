package redisbucket_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
)

var modelRun atomic.Int64

// FuzzPolicyModel drives AllowLimits on one key with limits chosen per
// call from four Names, in any order and at any capacity (one Name alone
// runs the script's one-limit fast path when the key holds only its
// record), against a model:
// all or nothing, state per Name, a changed capacity clamping the balance,
// the Decision's deciding limit, and the stored value holding exactly one
// record per Name that is not full. The limits have rate 0, so nothing
// refills and every number is exact whatever the server's clock; the order
// of the limits changes from call to call, so records are read both in the
// call's order and out of it. Each input byte triple is one call: which
// Names (a bitmask) and their order, a capacity seed, and n.
//
// A mask with bit 0x80 first rewrites every stored record as full (debt 0)
// and keeps it: the state of a record whose bucket refilled while the key
// was kept (by a Name not full, or until the next write or the key's PX).
// The model holds it as full, a Name never used: a carry to any capacity
// finds it full, and the next write drops it.
func FuzzPolicyModel(f *testing.F) {
	f.Add([]byte{0x0f, 0x12, 0x03, 0x05, 0x34, 0x02, 0x0f, 0x56, 0x01, 0x03, 0x00, 0x09, 0x1a, 0x77, 0x00})
	f.Add([]byte{0x01, 0x00, 0x01, 0x03, 0x11, 0x01, 0x07, 0x22, 0x02, 0x0f, 0x33, 0x03, 0x08, 0x00, 0x01, 0x0f, 0x70, 0x00})
	f.Add([]byte{0x0c, 0x45, 0x02, 0x0c, 0x54, 0x02, 0x0c, 0x45, 0x02, 0x03, 0x21, 0x05, 0x0f, 0x00, 0x00})
	// One key between one limit (the script's fast path) and several: a
	// alone twice (absent, then its own record), a and b (two records), a
	// alone on the two-record value, b clamped full and dropped (a's record
	// alone again), a peeked and denied alone, then a at another capacity
	// (carried over) and alone at it.
	f.Add([]byte{0x01, 0x02, 0x01, 0x01, 0x02, 0x01, 0x03, 0x02, 0x01, 0x01, 0x02, 0x00, 0x02, 0x00, 0x00, 0x01, 0x02, 0x00, 0x01, 0x02, 0x01, 0x01, 0x05, 0x00, 0x01, 0x05, 0x01})
	// a and b drained in part (a 4 of 5 left, b 7 of 8), both kept full
	// (0x80) and b peeked at its own capacity (no write: both stay), then a
	// carried to capacity 8 on a peek (full: 8, not 5; the conversion
	// writes, dropping both) and 8 taken at capacity 8.
	f.Add([]byte{0x03, 0x04, 0x01, 0x82, 0x04, 0x00, 0x01, 0x07, 0x00, 0x01, 0x07, 0x08})
	c := client(f, srv)
	l, err := redisbucket.New(c, 1, 1, redisbucket.WithPrefix("t:model:"), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		f.Fatal(err)
	}
	names := []string{"a", "b", "c", "d"}
	f.Fuzz(func(t *testing.T, ops []byte) {
		ctx := context.Background()
		key := fmt.Sprint("k", modelRun.Add(1))
		rk := redisbucket.RedisKey(l, key)
		// stored: the records the key holds, each its capacity and tokens;
		// tokens == capacity only for a record kept full (bit 0x80).
		type record struct{ capacity, tokens int64 }
		stored := map[string]record{}
		for i := 0; i+2 < len(ops) && i < 3*40; i += 3 {
			mask, seed, n := ops[i], ops[i+1], int64(ops[i+2]%10)
			if mask&0x80 != 0 && len(stored) > 0 {
				v, _ := c.Get(ctx, rk).Result()
				recs, _ := redisbucket.Decode(v)
				var full []string
				for _, r := range recs {
					rec, _, _ := redisbucket.Record(admit.Limit{Name: r.Name, Capacity: r.Cap / r.Per}, 0, r.T)
					full = append(full, rec)
				}
				if err := c.Set(ctx, rk, redisbucket.Join(full...), 0).Err(); err != nil {
					t.Fatal(err)
				}
				for name, r := range stored {
					stored[name] = record{r.capacity, r.capacity}
				}
			}
			var limits []admit.Limit
			for j := range names {
				// Rotate the order by the seed's high bits.
				name := names[(j+int(seed>>6))%len(names)]
				if mask&(1<<((j+int(seed>>6))%len(names))) != 0 {
					limits = append(limits, admit.Limit{Name: name, Capacity: int64((int(seed)+3*j)%8) + 1})
				}
			}
			if len(limits) == 0 {
				continue
			}
			d, err := l.AllowLimits(ctx, key, n, limits...)
			// The model: each limit's balance, clamped to its capacity; a
			// record full under its capacity is full under any.
			bal := make([]int64, len(limits))
			minCap := limits[0].Capacity
			changed := false
			for j, lm := range limits {
				bal[j] = lm.Capacity
				if r, ok := stored[lm.Name]; ok {
					if r.tokens < r.capacity {
						bal[j] = min(r.tokens, lm.Capacity)
					}
					changed = changed || r.capacity != lm.Capacity
				}
				minCap = min(minCap, lm.Capacity)
			}
			if n > minCap {
				if !errors.Is(err, admit.ErrUnsatisfiable) || d.Allowed {
					t.Fatalf("op %d: n=%d above capacity %d: %+v, %v", i/3, n, minCap, d, err)
				}
				continue // nothing written, nothing converted
			}
			if err != nil {
				t.Fatalf("op %d: %v", i/3, err)
			}
			allowed := true
			for j := range limits {
				allowed = allowed && bal[j] >= n
			}
			if allowed {
				for j := range bal {
					bal[j] -= n
				}
			}
			fewest, decider := bal[0], 0
			for j := range bal {
				if bal[j] < fewest {
					fewest, decider = bal[j], j
				}
			}
			if !allowed {
				// Every short limit waits forever (rate 0): the first decides.
				for j := range bal {
					if bal[j] < n {
						decider = j
						break
					}
				}
			}
			before := fmt.Sprint(stored)
			notFull := false
			for j, lm := range limits {
				notFull = notFull || bal[j] < lm.Capacity
			}
			// A write (an admission of n > 0, or a conversion) stores the
			// call's limits that are not full and drops every full record;
			// anything else leaves the value as it was.
			if (allowed && n > 0) || changed {
				for name, r := range stored {
					if r.tokens == r.capacity {
						delete(stored, name)
					}
				}
				for j, lm := range limits {
					if bal[j] < lm.Capacity {
						stored[lm.Name] = record{lm.Capacity, bal[j]}
					} else {
						delete(stored, lm.Name)
					}
				}
			}
			want := admit.Decision{Allowed: allowed, Limit: limits[decider].Capacity, Remaining: fewest, Policy: limits[decider].Name}
			if !allowed {
				want.RetryAfter = redisbucket.Never
			}
			if notFull {
				want.ResetAfter = redisbucket.Never
			}
			if d != want {
				t.Fatalf("op %d: AllowLimits(%d, %v) = %+v, want %+v (stored before: %v)", i/3, n, limits, d, want, before)
			}
			// One record per Name stored, each with the model's capacity
			// and tokens, no TTL.
			v, _ := c.Get(ctx, rk).Result()
			recs, parsed := redisbucket.Decode(v)
			if !parsed || len(recs) != len(stored) {
				t.Fatalf("op %d: stored %q, want %d records for %v", i/3, v, len(stored), stored)
			}
			for _, r := range recs {
				if m, ok := stored[r.Name]; !ok || r.Cap/r.Per != m.capacity || (r.Cap-r.D)/r.Per != m.tokens {
					t.Fatalf("op %d: stored record %+v, want %v", i/3, r, stored)
				}
			}
			if ttl := c.PTTL(ctx, rk).Val(); len(stored) > 0 && ttl != -1 {
				t.Fatalf("op %d: PTTL %v on rate-0 records", i/3, ttl)
			}
		}
	})
}
