package redisstore_test

import (
	"testing"
	"time"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
)

// TestMarkRead: a key marked under S (5, 1 an hour), then (a) S's
// rate changes (5, 2 an hour: same burst, other sig): still 5 under S',
// still 5 (not 10) under L; (b) a debt charge of 2 under S on a marked key:
// 3 of 5 stands, the mark is gone (3 of 10 under L); (c) a debt charge of 0
// keeps the mark; (d) a refused request's debt charge stands.
func TestMarkRead(t *testing.T) {
	L := func(k string, n int64) rls.Hit {
		return rls.Hit{Key: k, Capacity: 10, Count: 0, Period: time.Hour, N: n}
	}
	S := func(k string, cnt, n int64) rls.Hit {
		return rls.Hit{Key: k, Capacity: 5, Count: cnt, Period: time.Hour, N: n}
	}
	debt := func(h rls.Hit) rls.Hit { h.Debt = true; return h }
	for _, b := range backends(t) {
		mark := func(k string) {
			decide1(t, b.s, L(k, 5))
			decide1(t, b.s, S(k, 1, 0))
		}
		rem := func(h rls.Hit) int64 { _, r := decide1(t, b.s, h); return r[0].Remaining }
		check := func(what string, got, want int64) {
			t.Helper()
			if got != want {
				t.Errorf("%s: %s: %d, want %d", b.name, what, got, want)
			}
		}
		mark("a")
		check("a: under S' (rate changed)", rem(S("a", 2, 0)), 5)
		check("a: then under L", rem(L("a", 0)), 5)
		mark("b")
		decide1(t, b.s, debt(S("b", 1, 2)))
		check("b: under S after a charge of 2", rem(S("b", 1, 0)), 3)
		check("b: then under L", rem(L("b", 0)), 3)
		mark("c")
		decide1(t, b.s, debt(S("c", 1, 0)))
		check("c: under L after a charge of 0", rem(L("c", 0)), 5)
		mark("d")
		a, _ := decide1(t, b.s, debt(S("d", 1, 2)), S("d", 1, 4))
		check("d: refused", map[bool]int64{true: 1}[a], 0)
		check("d: under L after a refused charge of 2", rem(L("d", 0)), 3)
	}
}

var _ = memstore.New
