package redisstore_test

import (
	"context"
	"testing"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/redisstore"
)

// BenchmarkDecide is one request's round trip through the store to the
// test servers on loopback: a key under a limit of a million a second
// taking 1 a request, so that it stays in debt and a Cluster's key keeps
// its most points; on one Redis, and on the Cluster with one key and with
// two keys on different masters (the split path, admitted: no give-back).
func BenchmarkDecide(b *testing.B) {
	lim := rh("", 1_000_000, 1_000_000, 1)
	lim.Period = 1e9 // a second
	run := func(b *testing.B, s *redisstore.Store, keys ...string) {
		hits := make([]rls.Hit, len(keys))
		for i, k := range keys {
			hits[i] = lim
			hits[i].Key = k
		}
		res := make([]rls.Result, len(hits))
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if ok, err := s.Decide(ctx, hits, res); err != nil || !ok {
				b.Fatalf("admitted %v, %v", ok, err)
			}
		}
	}
	b.Run("store=single/keys=1", func(b *testing.B) {
		s, _, _ := singleStoreOf(b)
		run(b, s, "a")
	})
	b.Run("store=cluster/keys=1", func(b *testing.B) {
		s, _, _ := splitStore(b)
		run(b, s, "a")
	})
	b.Run("store=cluster/keys=2", func(b *testing.B) {
		s, c, pfx := splitStore(b)
		run(b, s, "a", otherMaster(b, c, pfx, "a"))
	})
}
