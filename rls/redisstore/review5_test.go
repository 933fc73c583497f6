package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/admit-go/admit"
	"github.com/admit-go/admit/rls/redisstore"
	"github.com/redis/go-redis/v9"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
)

// TestReview5NegativeN: rls.Store's rules 1 and 4: a negative N is never
// held, so a request whose enforced hit asks a negative N is refused. The
// script reads a negative n as a give-back (ok = 1, the request stays
// admitted), so the Redis store admitted such a request while reporting
// the hit not OK; memstore refuses it.
func TestReview5NegativeN(t *testing.T) {
	h := rls.Hit{Key: "neg", Capacity: 10, Count: 1, Period: time.Hour, N: -1}
	for _, b := range []struct {
		name string
		s    rls.Store
	}{{"memstore", memstore.New()}, {"redis-single", singleStore(t)}, {"redis-cluster", clusterStore(t)}} {
		res := make([]rls.Result, 1)
		a, err := b.s.Decide(context.Background(), []rls.Hit{h}, res)
		if err != nil {
			t.Fatal(err)
		}
		if a || res[0].OK {
			t.Errorf("%s: a hit of N = -1 (not shadow): admitted %v, OK %v; want refused", b.name, a, res[0].OK)
		}
	}
}

// interleaveExp is interleave (interleave_test.go) with limits that fill
// within the walk's aging, so keys and marks expire between a take and its
// give-back and between two give-backs. The model accepts an expiry: after
// each aging, a key that Redis no longer holds is full in the model too
// (the documented forgetting of a mark). Everything else is as in
// interleave: the store must never hold more than the model in which the
// refused requests never took.
func interleaveExp(t *testing.T, s *redisstore.Store, c redis.UniversalClient, pfx string, seed uint64, lims []rls.Hit, steps, maxAge int, ageBy time.Duration) (int, string) {
	t.Helper()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 77))
	key := fmt.Sprintf("rx%d", seed)
	type pending struct {
		h  rls.Hit
		tk redisstore.TakeState
	}
	var pend []pending
	var log []string
	m := rmodel{}
	aged := 0
	check := func(step int, rem int64, h rls.Hit, good bool) bool {
		capacity := h.Capacity
		if k := m[key]; k != nil {
			capacity = k.cap
		}
		mb := 2 * capacity
		if k := m[key]; k != nil && !k.full {
			mb = k.bal
		}
		sb, per := storedBalance(t, c, pfx+key)
		if per == 0 {
			sb, per = 2*capacity, 1
		}
		if !good || sb > mb*per+per/8 {
			log = append(log, fmt.Sprintf("  ^ step %d: the store holds %d/%d half tokens (%d left), the model %d (held %v)", step, sb, per, rem, mb, good))
			return false
		}
		return true
	}
	oks := func(res []rls.Result) []bool {
		o := make([]bool, len(res))
		for i := range res {
			o[i] = res[i].OK
		}
		return o
	}
	halfHours := int64(ageBy / (30 * time.Minute))
	for step := 0; step < steps || len(pend) > 0; step++ {
		switch x := r.IntN(12); {
		case step < steps && x < 2 && aged < maxAge:
			aged++
			ageRedis(t, c, pfx, ageBy)
			m.age(halfHours)
			// a key about to expire (ageRedis keeps one with ms left) is
			// expired now, not between this check and the next request
			if pt, _ := c.PTTL(ctx, pfx+key).Result(); pt > 0 && pt < time.Second {
				c.Del(ctx, pfx+key)
			}
			if n, _ := c.Exists(ctx, pfx+key).Result(); n == 0 {
				if k := m[key]; k != nil && !k.full {
					log = append(log, fmt.Sprintf("age %v: expired, the model had %d half tokens of %d", ageBy, k.bal, 2*k.cap))
					k.full = true
				} else {
					log = append(log, fmt.Sprintf("age %v: absent", ageBy))
				}
			} else {
				log = append(log, fmt.Sprintf("age %v", ageBy))
			}
		case step < steps && x < 6:
			req := shadowDebts(r, randomHits(r, key, lims, 8, 2))
			ok, res, gb, tk, err := s.TakeReqForTest(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			var good bool
			switch {
			case !ok:
				good = m.forced(req, false, oks(res))
				log = append(log, fmt.Sprintf("split %s: refused here %v", fmtReq(req), oks(res)))
			case r.IntN(4) == 0 || gb.N == 0:
				good = m.forced(req, true, oks(res))
				log = append(log, fmt.Sprintf("split %s: kept %v", fmtReq(req), oks(res)))
			default:
				good = m.forced(req, false, oks(res))
				pend = append(pend, pending{gb, tk})
				log = append(log, fmt.Sprintf("split %s: pending, back %d of %d/%d %v", fmtReq(req), gb.N, gb.Capacity, gb.Count, oks(res)))
			}
			if !check(step, res[len(res)-1].Remaining, req[len(req)-1], good) {
				return step, strings.Join(log, "\n")
			}
		case len(pend) > 0 && (step >= steps || x < 9):
			i := r.IntN(len(pend))
			p := pend[i]
			pend = append(pend[:i], pend[i+1:]...)
			res := giveBack(t, s, p.h, p.tk)
			log = append(log, fmt.Sprintf("give back %d of %d/%d (%d left)", p.h.N, p.h.Capacity, p.h.Count, res.Remaining))
			if !check(step, res.Remaining, p.h, true) {
				return step, strings.Join(log, "\n")
			}
		case step < steps:
			req := shadowDebts(r, randomHits(r, key, lims, 8, 2))
			res := make([]rls.Result, len(req))
			ok, err := s.Decide(ctx, req, res)
			if err != nil {
				t.Fatal(err)
			}
			good := m.forced(req, ok, oks(res))
			log = append(log, fmt.Sprintf("decide %s: %v %v", fmtReq(req), ok, oks(res)))
			if !check(step, res[len(res)-1].Remaining, req[len(req)-1], good) {
				return step, strings.Join(log, "\n")
			}
		}
	}
	return -1, strings.Join(log, "\n")
}

// TestReview5ExpiringWalk: interleave with expiries (interleaveExp).
func TestReview5ExpiringWalk(t *testing.T) {
	sets := []struct {
		name  string
		lims  []rls.Hit
		ageBy time.Duration
	}{
		// fill times 1 h, 2.5 h, 30 min, never: half-hour steps expire the fast ones
		{"fast", []rls.Hit{rh("", 4, 4, 0), rh("", 10, 4, 0), rh("", 5, 10, 0), rh("", 10, 0, 0)}, 30 * time.Minute},
		{"mixed", []rls.Hit{rh("", 6, 12, 0), rh("", 3, 3, 0), rh("", 10, 0, 0), rh("", 8, 2, 0)}, 30 * time.Minute},
		{"hour", []rls.Hit{rh("", 4, 4, 0), rh("", 10, 4, 0), rh("", 5, 10, 0), rh("", 10, 0, 0)}, time.Hour},
	}
	for i, store := range []string{"single", "cluster"} {
		for _, set := range sets {
			t.Run(store+"/"+set.name, func(t *testing.T) {
				c := trackedStores(t)[i]
				fails := 0
				for seed := range uint64(review5Seeds()) {
					step, log := interleaveExp(t, c.s, c.c, c.pfx, seed, set.lims, 40, 6, set.ageBy)
					if step >= 0 {
						fails++
						if fails <= 2 {
							t.Errorf("seed %d: at step %d the key holds more than the model (expiries accepted):\n%s", seed, step, log)
						}
					}
				}
				if fails > 0 {
					t.Errorf("%d walks over", fails)
				}
			})
		}
	}
}

// TestReview5MarkedRunCarried: a key of burst 10 that never refills (L)
// has 4 left (L took 6). A split request under S (burst 4, 4 a second)
// carries it into S (4 of 4, a mark: 4 under L again), takes 1 and is
// refused by another node. Before its give-back (which may come up to two
// timeouts later: one for the slowest node, one of its own), S's refill
// brings the key back to full (250 ms; the mark would live a second).
// Read under S, such a run is the mark again (fde17aa); read under L, it
// is carried as a full bucket: 10 of 10, and L admits 10 more, 16 through
// a burst of 10 that never refills (had the refused request never taken,
// L reads the mark's 4). The give-back then finds the key under L and
// returns nothing. Real time, not ageRedis: the versions are what the
// store wrote.
func TestReview5MarkedRunCarried(t *testing.T) {
	for _, st := range trackedStores(t) {
		ctx := context.Background()
		L := rls.Hit{Key: "mrc", Capacity: 10, Count: 0, Period: time.Hour, N: 6}
		S := rls.Hit{Key: "mrc", Capacity: 4, Count: 4, Period: time.Second, N: 1}
		if a, _, _, _, err := st.s.TakeReqForTest(ctx, []rls.Hit{L}); err != nil || !a {
			t.Fatalf("%s: L 6: %v %v", st.name, a, err)
		}
		ok, _, gb, tk, err := st.s.TakeReqForTest(ctx, []rls.Hit{S})
		if err != nil || !ok || gb.N != 1 {
			t.Fatalf("%s: S 1: %v %v %d", st.name, ok, err, gb.N)
		}
		time.Sleep(400 * time.Millisecond)
		admitted := int64(6)
		for _, n := range []int64{10, 5, 4} {
			L.N = n
			if a, _ := decide1(t, st.s, L); a {
				admitted += n
				break
			}
		}
		giveBack(t, st.s, gb, tk)
		L.N = 1
		for range 10 {
			if a, _ := decide1(t, st.s, L); a {
				admitted++
			}
		}
		if admitted > 10 {
			t.Errorf("%s: %d admitted under a burst of 10 that never refills, want at most 10 (the refused take's refill ended the mark)", st.name, admitted)
		}
	}
}

// ageRedisVersions is ageRedis that ages a tracked key's version too (its
// points and receipts are ages from it), so that the horizon sees the
// time passed: a walk that compares a tracked store with memory across
// aging, with no give-back pending, needs it.
func ageRedisVersions(t *testing.T, c redis.UniversalClient, pfx string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	node := func(ctx context.Context, n *redis.Client) error {
		it := n.Scan(ctx, 0, pfx+"*", 1000).Iterator()
		for it.Next(ctx) {
			k := it.Val()
			v, err := n.Get(ctx, k).Result()
			if err != nil {
				return err
			}
			pt, err := n.PTTL(ctx, k).Result()
			if err != nil {
				return err
			}
			f := strings.SplitN(v, " ", 4) // d, t, sig, the version and after
			if len(f) < 4 {
				continue
			}
			rest := f[3]
			vt, tail, _ := strings.Cut(rest, " ")
			suffix := ""
			for len(vt) > 0 && (vt[len(vt)-1] < '0' || vt[len(vt)-1] > '9') {
				suffix = vt[len(vt)-1:] + suffix
				vt = vt[:len(vt)-1]
			}
			ver, err := strconv.ParseInt(vt, 10, 64)
			if err != nil {
				return fmt.Errorf("key %q: %q", k, v)
			}
			nv := f[0] + " " + f[1] + " " + f[2] + " " + strconv.FormatInt(ver-d.Microseconds(), 10) + suffix
			if tail != "" {
				nv += " " + tail
			}
			var kt time.Duration = -1
			if pt > 0 {
				kt = pt
			}
			if err := n.Set(ctx, k, nv, max(kt, 0)).Err(); err != nil {
				return err
			}
		}
		return it.Err()
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, node)
	case *redis.Client:
		err = node(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	ageRedis(t, c, pfx, d)
}

// review5Seeds is the expiring walks' seeds: 150, or REVIEW5_SEEDS.
func review5Seeds() int {
	if n, err := strconv.Atoi(os.Getenv("REVIEW5_SEEDS")); err == nil {
		return n
	}
	return 150
}

// TestReview5OldScriptErasesMark: during a rolling upgrade a replica from
// before the mark (3fae337) reads a mark as another limit's full bucket
// (never more than full, TestOldScriptReadsMark) and, having carried it,
// writes it back: full, so it deletes the key, even for a peek (n = 0). A
// new replica then reads the key under the larger limit as full: a key of
// burst 10 that never refills admits 3, then 10 more (13), on the new
// replicas alone bar one old peek. docs/rls.md says the old replicas
// "keep their old behaviour"; it does not say that they also undo the new
// replicas' marks. A doc point: it fails by design until the doc (or a
// mixed-fleet rule) says so.
func TestReview5OldScriptErasesMark(t *testing.T) {
	old, err := os.ReadFile("testdata/script-3fae337.lua")
	if err != nil {
		t.Fatal(err)
	}
	s, c, p := singleStoreOf(t)
	s.TrackForTest()
	L := rls.Hit{Key: "oem", Capacity: 10, Count: 0, Period: time.Hour, N: 3}
	S := rls.Hit{Key: "oem", Capacity: 5, Count: 0, Period: time.Hour}
	admitted := int64(0)
	if a, _ := decide1(t, s, L, S); a { // 7 under L, a mark under S (5 of 5, 5 under L)
		admitted += 3
	}
	runOld(t, c, string(old), p, S) // an old replica's peek under S
	L.N = 10
	if a, _ := decide1(t, s, L); a {
		admitted += 10
	}
	if admitted > 10 {
		t.Errorf("%d admitted through a burst of 10 that never refills (an old replica's peek under the smaller limit deleted the mark)", admitted)
	}
}

// TestReview5ErrorGivesBack: on a Cluster, a request whose one key errs
// (a hash where a bucket should be: WRONGTYPE) while its other key, on
// another master, admitted fails with a plain error, and the admitted
// key's take is given back exactly once: it reads full again.
func TestReview5ErrorGivesBack(t *testing.T) {
	ctx := context.Background()
	s, c, p := splitStore(t)
	a := "egb-a"
	b := otherMaster(t, c, p, a)
	if err := c.HSet(ctx, p+b, "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		hits := []rls.Hit{{Key: a, Capacity: 10, Count: 0, Period: time.Hour, N: 4}, {Key: b, Capacity: 10, Count: 0, Period: time.Hour, N: 1}}
		ok, err := s.Decide(ctx, hits, make([]rls.Result, 2))
		if ok || err == nil || errors.Is(err, admit.ErrUnavailable) {
			t.Fatalf("admitted %v, %v; want a plain error", ok, err)
		}
	}
	ok, res := decide1(t, s, rls.Hit{Key: a, Capacity: 10, Count: 0, Period: time.Hour, N: 10})
	if !ok {
		t.Errorf("after three failed requests the other key holds %d of 10: their takes were not all given back", res[0].Remaining)
	}
}
