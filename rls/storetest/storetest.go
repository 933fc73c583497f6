// Package storetest implements the conformance suite every rls.Store
// passes (the memory store and the Redis store, single and Cluster). Its
// buckets refill at most one token an hour, so the cases hold on any clock,
// a server's included, however slow the machine; the one case that needs
// time to pass sleeps, and relies only on at least that much passing.
package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admit-go/admit/rls"
)

// hit is a bucket of capacity tokens refilled once an hour (count 0: never).
func hit(key string, capacity, count, n int64) rls.Hit {
	return rls.Hit{Key: key, Capacity: capacity, Count: count, Period: time.Hour, N: n}
}

// Run runs the suite; newStore returns an empty store (keys unique to the
// call, if the backend is shared).
func Run(t *testing.T, newStore func(t *testing.T) rls.Store) {
	t.Run("AllOrNothing", func(t *testing.T) { allOrNothing(t, newStore(t)) })
	t.Run("SameKeyTwice", func(t *testing.T) { sameKeyTwice(t, newStore(t)) })
	t.Run("TwoLimitsOneKey", func(t *testing.T) { twoLimitsOneKey(t, newStore(t)) })
	t.Run("TwoLimitsNoRefill", func(t *testing.T) { twoLimitsNoRefill(t, newStore(t)) })
	t.Run("Shadow", func(t *testing.T) { shadow(t, newStore(t)) })
	t.Run("Costs", func(t *testing.T) { costs(t, newStore(t)) })
	t.Run("ChangedLimit", func(t *testing.T) { changedLimit(t, newStore(t)) })
	t.Run("Concurrent", func(t *testing.T) { concurrent(t, newStore(t)) })
	t.Run("RaisedWhileRefused", func(t *testing.T) { raisedWhileRefused(t, newStore(t)) })
	t.Run("ZeroLimit", func(t *testing.T) { zeroLimit(t, newStore(t)) })
	t.Run("Debt", func(t *testing.T) { debt(t, newStore(t)) })
	t.Run("DebtRefused", func(t *testing.T) { debtRefused(t, newStore(t)) })
}

func decide(t *testing.T, s rls.Store, hits ...rls.Hit) (bool, []rls.Result) {
	t.Helper()
	res := make([]rls.Result, len(hits))
	ok, err := s.Decide(context.Background(), hits, res)
	if err != nil {
		t.Fatalf("Decide(%+v): %v", hits, err)
	}
	return ok, res
}

// remaining peeks at a bucket.
func remaining(t *testing.T, s rls.Store, h rls.Hit) int64 {
	t.Helper()
	h.N = 0
	ok, res := decide(t, s, h)
	if !ok || !res[0].OK {
		t.Fatalf("a peek at %q was refused", h.Key)
	}
	return res[0].Remaining
}

func expect(t *testing.T, what string, got, want any) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func allOrNothing(t *testing.T, s rls.Store) {
	a, b := hit("a", 10, 1, 1), hit("b", 2, 1, 1)
	for range 2 {
		ok, _ := decide(t, s, a, b)
		expect(t, "admitted", ok, true)
	}
	ok, res := decide(t, s, a, b)
	expect(t, "admitted with b empty", ok, false)
	expect(t, "a held its cost", res[0].OK, true)
	expect(t, "b held its cost", res[1].OK, false)
	expect(t, "a's reported remaining", res[0].Remaining, int64(8))
	expect(t, "a's remaining after the refusal", remaining(t, s, a), int64(8))
	if res[0].ResetAfter <= 0 || res[0].ResetAfter > 2*time.Hour {
		t.Fatalf("a's reset %v is not within (0, 2h]", res[0].ResetAfter)
	}
}

func sameKeyTwice(t *testing.T, s rls.Store) {
	c := hit("c", 3, 1, 2)
	ok, res := decide(t, s, c, c)
	expect(t, "two hits of 2 on a bucket of 3", ok, false)
	expect(t, "the first held", res[0].OK, true)
	expect(t, "the second held", res[1].OK, false)
	expect(t, "the first's remaining, nothing taken", res[0].Remaining, int64(3))
	expect(t, "the first's reset, nothing taken", res[0].ResetAfter, time.Duration(0))
	expect(t, "remaining", remaining(t, s, c), int64(3))
	// Each hit reports the bucket right after it, as envoyproxy/ratelimit's
	// pipelined increments do: the first's take, then both.
	c.N = 1
	ok, res = decide(t, s, c, c)
	expect(t, "two hits of 1 on a bucket of 3", ok, true)
	expect(t, "the first's remaining", res[0].Remaining, int64(2))
	expect(t, "the second's remaining", res[1].Remaining, int64(1))
	if res[0].ResetAfter <= 0 || res[0].ResetAfter > time.Hour || res[1].ResetAfter <= time.Hour || res[1].ResetAfter > 2*time.Hour {
		t.Fatalf("resets %v, %v: not within (0, 1h] and (1h, 2h]", res[0].ResetAfter, res[1].ResetAfter)
	}
	expect(t, "remaining", remaining(t, s, c), int64(1))
}

// twoLimitsOneKey: one key under two limits in one request (a descriptor
// sent twice, once with an override): the hits apply in order, the second
// carrying over the balance the first left to its own limit and taking
// from it; the request is still all or nothing, over both.
func twoLimitsOneKey(t *testing.T, s rls.Store) {
	a, b := hit("two", 5, 0, 2), hit("two", 10, 0, 3)
	ok, res := decide(t, s, a, b)
	expect(t, "2 of 5, then 3 of the 3 carried into 10", ok, true)
	expect(t, "a held", res[0].OK, true)
	expect(t, "b held", res[1].OK, true)
	expect(t, "remaining under the first limit, after the first hit", res[0].Remaining, int64(3))
	expect(t, "remaining under the last limit", res[1].Remaining, int64(0))
	b.N = 0
	expect(t, "the bucket, under b", remaining(t, s, b), int64(0))

	// Refused by the second hit: the first's take is undone, and a full
	// bucket carried over stays full.
	a, b = hit("two2", 5, 0, 4), hit("two2", 10, 0, 2)
	ok, res = decide(t, s, a, b)
	expect(t, "4 of 5, then 2 of the 1 carried into 10", ok, false)
	expect(t, "a held", res[0].OK, true)
	expect(t, "b lacked", res[1].OK, false)
	expect(t, "the bucket under b after the refusal", remaining(t, s, b), int64(10))
	expect(t, "the bucket under a after the refusal", remaining(t, s, a), int64(5))

	// Refused by another key: neither of the two hits takes; the key was
	// carried over to b and lowered to a with 2 of 5 left, then b's
	// balance, 2, carries into b's 10.
	empty := hit("two-empty", 1, 0, 1)
	decide(t, s, empty)
	a, b = hit("two3", 5, 0, 3), hit("two3", 10, 0, 1)
	ok, _ = decide(t, s, a, b, empty)
	expect(t, "refused by the empty key", ok, false)
	expect(t, "the bucket took nothing", remaining(t, s, a), int64(5))
}

func shadow(t *testing.T, s rls.Store) {
	sh, en := hit("sh", 1, 1, 1), hit("en", 5, 1, 1)
	sh.Shadow = true
	ok, _ := decide(t, s, sh, en)
	expect(t, "first", ok, true)
	ok, res := decide(t, s, sh, en)
	expect(t, "a shadow bucket lacking its cost", ok, true)
	expect(t, "shadow's ok", res[0].OK, false)
	expect(t, "enforced bucket took", remaining(t, s, en), int64(3))
	expect(t, "shadow took nothing more", remaining(t, s, sh), int64(0))
}

func costs(t *testing.T, s rls.Store) {
	h := hit("n", 4, 1, 5)
	ok, res := decide(t, s, h)
	expect(t, "a cost above the capacity", ok, false)
	expect(t, "its ok", res[0].OK, false)
	expect(t, "remaining", res[0].Remaining, int64(4))
	h.N = 4
	ok, _ = decide(t, s, h)
	expect(t, "the whole capacity", ok, true)
	h.N = 0
	ok, res = decide(t, s, h)
	expect(t, "a check on an empty bucket", ok, true)
	expect(t, "its remaining", res[0].Remaining, int64(0))
	z := hit("zero", 3, 0, 3)
	ok, res = decide(t, s, z)
	expect(t, "a bucket that never refills", ok, true)
	expect(t, "its reset", res[0].ResetAfter, rls.Never)
	// A negative cost is never held (rule 4), nor read as a refund: the
	// Redis script took it for a give-back's and admitted the request.
	neg := hit("neg", 4, 1, -1)
	ok, res = decide(t, s, neg)
	expect(t, "a negative cost", ok, false)
	expect(t, "its ok", res[0].OK, false)
	expect(t, "a negative cost took nothing and gave nothing", remaining(t, s, neg), int64(4))
}

// changedLimit: a changed limit carries the balance over, clamped to the
// new capacity, whether the request that brings it is admitted or refused;
// lowering keeps a balance below the new capacity, and raising again adds
// nothing at once.
func changedLimit(t *testing.T, s rls.Store) {
	ok, _ := decide(t, s, hit("k", 10, 1, 4))
	expect(t, "take 4 of 10", ok, true)
	ok, res := decide(t, s, hit("k", 5, 1, 1))
	expect(t, "take 1 under capacity 5", ok, true)
	expect(t, "6 clamped to 5, less 1", res[0].Remaining, int64(4))
	expect(t, "a larger capacity adds nothing", remaining(t, s, hit("k", 100, 1, 0)), int64(4))

	ok, _ = decide(t, s, hit("l", 10, 1, 8))
	expect(t, "take 8 of 10", ok, true)
	ok, res = decide(t, s, hit("l", 5, 1, 3))
	expect(t, "3 of 2 under capacity 5", ok, false)
	expect(t, "remaining", res[0].Remaining, int64(2))
	expect(t, "raised again", remaining(t, s, hit("l", 100, 100, 0)), int64(2))
	ok, res = decide(t, s, hit("l", 1, 0, 0))
	expect(t, "a check under capacity 1", ok, true)
	expect(t, "clamped to 1", res[0].Remaining, int64(1))
}

// concurrent runs overlapping requests of three buckets from many
// goroutines on buckets that never refill, then checks that every bucket
// lost exactly what the admitted requests cost: a partial take, or a
// give-back lost in a race, would break the sum.
func concurrent(t *testing.T, s rls.Store) {
	const capacity = 300
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	var mu sync.Mutex
	used := map[string]int64{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			res := make([]rls.Result, 3)
			for i := range 150 {
				hits := []rls.Hit{
					hit(keys[(g+i)%len(keys)], capacity, 0, 1+int64(i%3)),
					hit(keys[(g+2*i+1)%len(keys)], capacity, 0, 1),
					hit(keys[(3*g+i+2)%len(keys)], capacity, 0, 2),
				}
				if hits[0].Key == hits[1].Key || hits[1].Key == hits[2].Key || hits[0].Key == hits[2].Key {
					continue
				}
				ok, err := s.Decide(context.Background(), hits, res)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					mu.Lock()
					for _, h := range hits {
						used[h.Key] += h.N
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, k := range keys {
		left := remaining(t, s, hit(k, capacity, 0, 0))
		if left != capacity-used[k] || left < 0 {
			t.Errorf("%s: %d left, want %d - %d", k, left, capacity, used[k])
		}
	}
	if t.Failed() {
		t.Log(fmt.Sprint("used ", used))
	}
}

// raisedWhileRefused: a drained client keeps asking while its limit is
// raised from 1 an hour to 20 a second. The first request under the new
// limit carries the balance over and is refused (it holds a sliver of a
// token); that refusal must keep the carry-over, so that 150 ms later, 3
// tokens at the new rate, the client is admitted. Undoing it would make
// every request carry again from the old limit and find a sliver.
// twoLimitsNoRefill: a key of burst 10 under a second limit of burst 5 in
// the same request, or in a request of its own. 10 with 5 left is full
// under 5; carried back into 10 as full, or dropped as a full bucket and
// read under 10 as a key never seen, it had 10 again: a refused request, a
// peek or a shadow hit under the smaller limit refilled the bucket, and
// the key under 10 admitted 50 tokens in 10 rounds where 10 fit.
func twoLimitsNoRefill(t *testing.T, s rls.Store) {
	empty := hit("norefill-empty", 1, 0, 1)
	decide(t, s, empty)
	for _, tc := range []struct {
		name  string
		other func(key string) []rls.Hit // a request with key under the smaller limit
	}{
		{"refused, smaller limit first", func(k string) []rls.Hit { return []rls.Hit{hit(k, 5, 0, 1), hit(k, 10, 0, 5)} }},
		{"refused by another key", func(k string) []rls.Hit { return []rls.Hit{hit(k, 5, 0, 1), empty} }},
		{"a peek", func(k string) []rls.Hit { return []rls.Hit{hit(k, 5, 0, 0)} }},
		{"a shadow hit that lacks its cost, then 5 under 10", func(k string) []rls.Hit {
			sh := hit(k, 5, 0, 6)
			sh.Shadow = true
			return []rls.Hit{sh, hit(k, 10, 0, 5)}
		}},
	} {
		key := "norefill-" + strings.ReplaceAll(tc.name, " ", "-")
		big := hit(key, 10, 0, 5)
		admitted := int64(0)
		for range 10 {
			if ok, _ := decide(t, s, big); ok {
				admitted += big.N
			}
			hits := tc.other(key)
			if ok, _ := decide(t, s, hits...); ok {
				for _, h := range hits {
					if h.Key == key && h.Capacity == 10 {
						admitted += h.N
					}
				}
			}
		}
		if admitted > 10 {
			t.Errorf("%s: the key under a burst of 10 that never refills admitted %d tokens", tc.name, admitted)
		}
	}
}

func raisedWhileRefused(t *testing.T, s rls.Store) {
	low := hit("r", 1, 1, 1)
	high := rls.Hit{Key: "r", Capacity: 5, Count: 20, Period: time.Second, N: 1}
	ok, _ := decide(t, s, low)
	expect(t, "the one token", ok, true)
	ok, _ = decide(t, s, low)
	expect(t, "drained", ok, false)
	ok, res := decide(t, s, high)
	expect(t, "the first request under the raised limit", ok, false)
	if res[0].ResetAfter <= 0 || res[0].ResetAfter > 250*time.Millisecond {
		t.Fatalf("until full at 20 a second: %v, want (0, 250ms]", res[0].ResetAfter)
	}
	time.Sleep(150 * time.Millisecond)
	ok, _ = decide(t, s, high)
	expect(t, "admitted at the raised rate", ok, true)
}

// zeroLimit: a hit of capacity 0 refuses any cost but 0, and its refusal
// takes nothing from the request's other buckets.
func zeroLimit(t *testing.T, s rls.Store) {
	a := hit("za", 3, 1, 1)
	z := rls.Hit{Key: "zz", Capacity: 0, Count: 0, Period: time.Hour, N: 1}
	for range 3 {
		ok, res := decide(t, s, a, z)
		expect(t, "refused by the zero limit", ok, false)
		expect(t, "a held its cost", res[0].OK, true)
		expect(t, "the zero limit's ok", res[1].OK, false)
		expect(t, "the zero limit's remaining", res[1].Remaining, int64(0))
		expect(t, "the zero limit's reset", res[1].ResetAfter, time.Duration(0))
	}
	expect(t, "a after three refusals", remaining(t, s, a), int64(3))
	z.N = 0
	ok, _ := decide(t, s, a, z)
	expect(t, "a check of the zero limit", ok, true)
	expect(t, "a took", remaining(t, s, a), int64(2))
	z.N, z.Shadow = 1, true
	ok, _ = decide(t, s, a, z)
	expect(t, "a shadow zero limit", ok, true)
	expect(t, "a took again", remaining(t, s, a), int64(1))
}

// debtHit is a debt bucket of capacity 10 refilled 10 an hour.
func debtHit(key string, n int64) rls.Hit {
	h := hit(key, 10, 10, n)
	h.Debt = true
	return h
}

// debt: a debt bucket is charged whatever it holds, down to minus one
// burst, and holds nothing, not even a check, until refill repays it.
func debt(t *testing.T, s rls.Store) {
	ok, res := decide(t, s, debtHit("d", 6))
	expect(t, "6 of 10", ok, true)
	expect(t, "remaining", res[0].Remaining, int64(4))
	ok, res = decide(t, s, debtHit("d", 7))
	expect(t, "7 of 4", ok, false)
	expect(t, "its ok", res[0].OK, false)
	expect(t, "remaining in debt", res[0].Remaining, int64(0))
	if res[0].ResetAfter < 78*time.Minute-time.Second || res[0].ResetAfter > 78*time.Minute {
		t.Fatalf("a balance of -3: full in 13 tokens at 10 an hour, 78m; got %v", res[0].ResetAfter)
	}
	ok, _ = decide(t, s, debtHit("d", 0))
	expect(t, "a check in debt", ok, false)
	ok, res = decide(t, s, debtHit("d", 100))
	expect(t, "100 more", ok, false)
	if res[0].ResetAfter < 2*time.Hour-time.Second || res[0].ResetAfter > 2*time.Hour {
		t.Fatalf("the debt stops at minus one burst: full in 2h; got %v", res[0].ResetAfter)
	}
	// The rule loses debt: true (or an override without it applies): the
	// debt stays owed; no change of limit forgives counted usage.
	ok, res = decide(t, s, hit("d", 10, 10, 0))
	expect(t, "a check once the rule has no debt", ok, false)
	if res[0].ResetAfter < 2*time.Hour-time.Second || res[0].ResetAfter > 2*time.Hour {
		t.Fatalf("the debt stays when the rule loses debt: true: full in 2h; got %v", res[0].ResetAfter)
	}
	// Under a lower limit it is owed down to that limit's own bound, minus
	// its burst: 4 tokens at 4 an hour, full in 2h.
	ok, res = decide(t, s, hit("d", 4, 4, 0))
	expect(t, "a check under a lower limit", ok, false)
	if res[0].ResetAfter < 2*time.Hour-time.Second || res[0].ResetAfter > 2*time.Hour {
		t.Fatalf("minus one burst of the lower limit: full in 2h; got %v", res[0].ResetAfter)
	}
}

// debtRefused: a debt hit is charged when another hit refuses the
// request, while an ordinary hit takes nothing; a shadow debt hit is
// charged without refusing.
func debtRefused(t *testing.T, s rls.Store) {
	empty := hit("e", 1, 1, 1)
	ok, _ := decide(t, s, empty)
	expect(t, "drain e", ok, true)
	a := hit("a", 5, 1, 2)
	ok, res := decide(t, s, debtHit("u", 4), a, empty)
	expect(t, "refused by e", ok, false)
	expect(t, "u held", res[0].OK, true)
	expect(t, "u charged", remaining(t, s, debtHit("u", 0)), int64(6))
	expect(t, "a took nothing", remaining(t, s, a), int64(5))
	sh := debtHit("u", 20)
	sh.Shadow = true
	ok, res = decide(t, s, sh, a)
	expect(t, "a shadow debt hit does not refuse", ok, true)
	expect(t, "its ok", res[0].OK, false)
	expect(t, "a took", remaining(t, s, a), int64(3))
	ok, _ = decide(t, s, debtHit("u", 0))
	expect(t, "u in debt", ok, false)
}
