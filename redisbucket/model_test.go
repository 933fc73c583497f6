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
	c := client(f, srv)
	l, err := redisbucket.New(c, 1, 1, redisbucket.WithPrefix("t:model:"), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		f.Fatal(err)
	}
	names := []string{"a", "b", "c", "d"}
	f.Fuzz(func(t *testing.T, ops []byte) {
		ctx := context.Background()
		key := fmt.Sprint("k", modelRun.Add(1))
		held := map[string]int64{} // tokens of the Names stored, each below its capacity
		for i := 0; i+2 < len(ops) && i < 3*40; i += 3 {
			mask, seed, n := ops[i], ops[i+1], int64(ops[i+2]%10)
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
			// The model: each limit's balance, clamped to its capacity.
			bal := make([]int64, len(limits))
			minCap := limits[0].Capacity
			for j, lm := range limits {
				bal[j] = lm.Capacity
				if b, ok := held[lm.Name]; ok {
					bal[j] = min(b, lm.Capacity)
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
			notFull := false
			for j, lm := range limits {
				if bal[j] < lm.Capacity {
					held[lm.Name] = bal[j]
					notFull = true
				} else {
					delete(held, lm.Name)
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
				t.Fatalf("op %d: AllowLimits(%d, %v) = %+v, want %+v (held before: %v)", i/3, n, limits, d, want, held)
			}
			// One record per Name held, no TTL.
			v, _ := c.Get(ctx, redisbucket.RedisKey(l, key)).Result()
			recs, parsed := redisbucket.Decode(v)
			records := len(recs)
			if !parsed || records != len(held) {
				t.Fatalf("op %d: stored %q, want %d records for %v", i/3, v, len(held), held)
			}
			if ttl := c.PTTL(ctx, redisbucket.RedisKey(l, key)).Val(); len(held) > 0 && ttl != -1 {
				t.Fatalf("op %d: PTTL %v on rate-0 records", i/3, ttl)
			}
		}
	})
}
