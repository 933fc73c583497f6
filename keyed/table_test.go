package keyed_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
)

// TestProbeReadsOnlyTagMatches: a lookup dereferences no entry of another
// key except one whose tag (a byte of the hash) equals its key's. A probe
// that compared every key of its run, as the table did before its tags,
// reads other keys' entries, whose lines other cores write when they call
// for those keys; here, at 10k held keys of 16 bytes, every lookup through
// AllowN (the one-limit path) and AllowLimits (the multi-limit one)
// dereferences exactly the tag twins before its own entry, which the test
// counts from the table, and those are rare (a tag matches 1 slot in 255).
func TestProbeReadsOnlyTagMatches(t *testing.T) {
	ctx := context.Background()
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%012d", i)
	}
	for _, multi := range []bool{false, true} {
		t.Run(fmt.Sprint("multi=", multi), func(t *testing.T) {
			l, _ := newFake(t, 1e9, 1, keyed.WithMaxKeys(len(keys)))
			two := []admit.Limit{{Capacity: 1e9, Rate: 1}, {Name: "b", Capacity: 1e9, Rate: 1}}
			call := func(k string) {
				if multi {
					_, _ = l.AllowLimits(ctx, k, 1, two...)
				} else {
					_, _ = l.AllowN(ctx, k, 1)
				}
			}
			for _, k := range keys {
				call(k)
			}
			want, reads := int64(0), int64(0)
			for _, k := range keys {
				tw := int64(l.TagTwins(k))
				want += tw
				reads += tw
				if !multi {
					reads += min(tw, 1)
				}
			}
			n := l.CountCollisions() // this limiter's own: other tests may run in parallel
			for _, k := range keys {
				call(k)
			}
			if got := n.Load(); got != reads {
				t.Fatalf("%d lookups dereferenced %d entries of other keys; their runs hold %d tag twins before their own, which they read %d times", len(keys), got, want, reads)
			}
			if perLookup := float64(want) / float64(len(keys)); perLookup > 0.05 {
				t.Fatalf("%.3f tag twins per lookup: the tags do not separate keys", perLookup)
			}
			t.Logf("%d other keys' entries read in %d lookups", want, len(keys))
		})
	}
}
