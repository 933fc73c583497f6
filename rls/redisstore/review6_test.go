package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/internal/tick"
	"github.com/admit-go/admit/rls/memstore"
	"github.com/admit-go/admit/rls/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestReview6BusyMarkedRunStaysMark: a key of burst 10 at 10 an hour (L)
// has 9 left (a key with a PX of 6 minutes, L's refill of 1); a request
// under S (burst 5, 5 a second) clamps it (a mark, which alone would be
// written with the PX of a fill from empty under S: 1 s) and takes 1; S
// then takes 1 every 250 ms for 3 s, each refilled before the next. The
// run's key took max(its PX, PTTL, 1 s), and the PTTL was the plain L
// bucket's 6 minutes, not a mark's: so the key, and its run bit, lived 6
// minutes where the mark would have lived 1 s. Read under L 400 ms after
// the last take (S full again) memory admits 10; the tracked store read
// the refilled run as the mark, 5 of 10, 2 s after the mark would have
// expired, and 5 short for half an hour (L's refill). Fixed: the PTTL
// counts only for a key read in a run begun at a mark (s.rm).
func TestReview6BusyMarkedRunStaysMark(t *testing.T) {
	type st struct {
		name string
		s    rls.Store
		c    redis.UniversalClient
		pfx  string
	}
	stores := []st{{name: "memstore", s: memstore.New()}}
	for _, x := range trackedStores(t) {
		stores = append(stores, st{x.name, x.s, x.c, x.pfx})
	}
	got := map[string]int{}
	for _, x := range stores {
		L := rls.Hit{Key: "bmr", Capacity: 10, Count: 10, Period: time.Hour, N: 1}
		S := rls.Hit{Key: "bmr", Capacity: 5, Count: 5, Period: time.Second, N: 1}
		if a, _ := decide1(t, x.s, L); !a {
			t.Fatalf("%s: L 1 refused", x.name)
		}
		end := time.Now().Add(3 * time.Second)
		for time.Now().Before(end) {
			if a, _ := decide1(t, x.s, S); !a {
				t.Fatalf("%s: S 1 refused", x.name)
			}
			time.Sleep(250 * time.Millisecond)
		}
		time.Sleep(400 * time.Millisecond)
		if x.c != nil {
			raw, _ := x.c.Get(context.Background(), x.pfx+"bmr").Result()
			pt, _ := x.c.PTTL(context.Background(), x.pfx+"bmr").Result()
			t.Logf("%s: before L %q, PTTL %v", x.name, raw, pt)
		}
		n := 0
		for range 10 {
			if a, _ := decide1(t, x.s, L); a {
				n++
			}
		}
		got[x.name] = n
		_ = context.Background
	}
	for _, x := range stores[1:] {
		if got[x.name] < got["memstore"] {
			t.Errorf("%s: L admits %d of 10 after S's takes refilled, memory %d: the busy key keeps the mark's limit 2 s after the mark would have expired", x.name, got[x.name], got["memstore"])
		}
	}
}

// TestReview6CancelledSplit (passes): on a Cluster, requests of A (burst 10) and B
// (burst 4, on another master), neither refilling, from 4 goroutines,
// each with a context that ends after 0 to 3 ms or is cancelled at a
// random moment, so that it ends while keys are being decided or between
// the decision and the give-back. A request reported admitted must hold
// both takes, and no take may be given back twice: admitted plus what each
// key holds afterwards stays within its burst.
func TestReview6CancelledSplit(t *testing.T) {
	s, c, p := splitStore(t)
	a := "cxs-a"
	b := otherMaster(t, c, p, a)
	A := rls.Hit{Key: a, Capacity: 10, Count: 0, Period: time.Hour, N: 1}
	B := rls.Hit{Key: b, Capacity: 4, Count: 0, Period: time.Hour, N: 1}
	var mu sync.Mutex
	admitted, errs := 0, 0
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 6))
			for range 150 {
				var ctx context.Context
				var cancel context.CancelFunc
				if r.IntN(2) == 0 {
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(r.IntN(3000))*time.Microsecond)
				} else {
					ctx, cancel = context.WithCancel(context.Background())
					d := time.Duration(r.IntN(3000)) * time.Microsecond
					go func() { time.Sleep(d); cancel() }()
				}
				ok, err := s.Decide(ctx, []rls.Hit{A, B}, make([]rls.Result, 2))
				cancel()
				mu.Lock()
				if ok && err == nil {
					admitted++
				}
				if err != nil {
					errs++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	pa, pb := A, B
	pa.N, pb.N = 0, 0
	_, ra := decide1(t, s, pa)
	_, rb := decide1(t, s, pb)
	t.Logf("admitted %d, errors %d, A holds %d of 10, B %d of 4", admitted, errs, ra[0].Remaining, rb[0].Remaining)
	if admitted+int(ra[0].Remaining) > 10 || admitted+int(rb[0].Remaining) > 4 {
		t.Errorf("admitted %d, and A still holds %d of 10, B %d of 4: more than the bursts", admitted, ra[0].Remaining, rb[0].Remaining)
	}
}

// runOldOn runs the script from before the mark (testdata) on hits through
// any client (one key: one slot on a Cluster) and reports whether it
// admitted them.
func runOldOn(t *testing.T, c redis.Scripter, src, prefix string, hits ...rls.Hit) bool {
	t.Helper()
	var keys []string
	var args []any
	for _, h := range hits {
		tp, err := tick.New(h.Capacity, h.Count, h.Period, time.Microsecond, 1<<52)
		if err != nil {
			t.Fatal(err)
		}
		f := strconv.FormatInt
		flags := "0"
		if h.Debt {
			flags = "2"
		}
		sig := f(tp.CapU, 10) + ":" + f(tp.Per, 10) + ":" + f(tp.M, 10) + ":" + f(tp.Q, 10)
		keys = append(keys, prefix+h.Key)
		args = append(args, f(tp.CapU, 10), f(tp.Per, 10), f(tp.M, 10), f(tp.Q, 10), f(min(h.N, h.Capacity+1), 10), flags, sig, "0", "0")
	}
	out, err := redis.NewScript(src).Run(context.Background(), c, keys, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	return out[0] == 1
}

// TestReview6OldScriptWalk (passes, 1600 walks with REVIEW6_SEEDS=400 and
// REVIEW6_OLDMARK=1): interleave's walk (split takes kept or left
// pending, give-backs in any order, one-request decisions) with steps of
// the script from before the mark (an old replica during a rolling
// upgrade): one plain hit, under the limit the key is stored with (so no
// clamp: not the documented exception of an old replica undoing a mark),
// and never on a marked key. The store must never hold more than the model
// in which refused requests never took. REVIEW6_OLDMARK=1 also lets old
// steps touch a key whose run of debt began at a mark ("m" in its version).
func TestReview6OldScriptWalk(t *testing.T) {
	old, err := os.ReadFile("testdata/script-3fae337.lua")
	if err != nil {
		t.Fatal(err)
	}
	sets := [][]rls.Hit{
		{rh("", 10, 4, 0)},
		{rh("", 10, 4, 0), rh("", 5, 10, 0), rh("", 10, 0, 0)},
	}
	for i, store := range []string{"single", "cluster"} {
		c := trackedStores(t)[i]
		over := 0
		var seeds uint64
		seeds = 60
		if n, err := strconv.ParseUint(os.Getenv("REVIEW6_SEEDS"), 10, 64); err == nil {
			seeds = n
		}
		for si, lims := range sets {
			for seed := range seeds {
				step, log := oldWalk(t, c.s, c.c, c.pfx, string(old), seed, si, lims, 40)
				if step >= 0 {
					if over++; over <= 2 {
						t.Errorf("%s, set %d, seed %d: at step %d the key holds more than the model:\n%s", store, si, seed, step, log)
					}
				}
			}
		}
		if over > 0 {
			t.Errorf("%s: %d of %d walks over", store, over, 2*seeds)
		}
	}
}

func oldWalk(t *testing.T, s *redisstore.Store, c redis.UniversalClient, pfx, old string, seed uint64, si int, lims []rls.Hit, steps int) (int, string) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 606))
	key := fmt.Sprintf("ow%d-%d", si, seed)
	type pending struct {
		h  rls.Hit
		tk redisstore.TakeState
	}
	var pend []pending
	var log []string
	m := rmodel{}
	aged := 0
	aging := walkAging{expiries: true}
	check := func(step int, h rls.Hit, good bool) bool {
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
			raw, _ := c.Get(ctx, pfx+key).Result()
			log = append(log, fmt.Sprintf("  ^ step %d: the store holds %d/%d half tokens, the model %d (held %v); stored %q", step, sb, per, mb, good, raw))
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
	for step := 0; step < steps || len(pend) > 0; step++ {
		switch x := r.IntN(12); {
		case step < steps && x < 4:
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
			if !check(step, req[len(req)-1], good) {
				return step, strings.Join(log, "\n")
			}
		case len(pend) > 0 && (step >= steps || x < 7):
			i := r.IntN(len(pend))
			p := pend[i]
			pend = append(pend[:i], pend[i+1:]...)
			res := giveBack(t, s, p.h, p.tk)
			log = append(log, fmt.Sprintf("give back %d of %d/%d (%d left)", p.h.N, p.h.Capacity, p.h.Count, res.Remaining))
			if !check(step, p.h, true) {
				return step, strings.Join(log, "\n")
			}
		case step < steps && x == 10 && aged < 6 && os.Getenv("REVIEW6_NOAGE") == "":
			aged++
			ageRedis(t, c, pfx, 30*time.Minute)
			m.age(1)
			log = append(log, "age 30m"+aging.expire(t, c, pfx+key, m[key]))
		case step < steps && x < 10:
			// an old replica: one plain hit under the key's stored limit
			raw, _ := c.Get(ctx, pfx+key).Result()
			if strings.HasSuffix(raw, ":c") {
				continue
			}
			if os.Getenv("REVIEW6_OLDMARK") == "" && strings.Contains(raw, "m ") {
				continue
			}
			h := lims[r.IntN(len(lims))]
			if k := m[key]; k != nil && !k.full {
				for _, l := range lims {
					if l.Capacity == k.cap && l.Count == k.rate {
						h = l
					}
				}
			}
			h.Key, h.N = key, int64(r.IntN(5))
			ok := runOldOn(t, c, old, pfx, h)
			good := m.forced([]rls.Hit{h}, ok, []bool{ok})
			log = append(log, fmt.Sprintf("old %s: %v (was %q)", fmtReq([]rls.Hit{h}), ok, raw))
			if !check(step, h, good) {
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
			if !check(step, req[len(req)-1], good) {
				return step, strings.Join(log, "\n")
			}
		}
	}
	if os.Getenv("REVIEW6_TRACE") != "" && seed == 3 {
		t.Logf("walk %s:\n%s", key, strings.Join(log, "\n"))
	}
	return -1, ""
}

// TestReview6OldScriptEndsMarkedRun: TestMarkedRunCarriedAsMark's key
// (burst 10 that never refills, L took 6; a split request under S, burst 4
// at 4 a second, marks it and takes 1, refused by another node), where,
// before the give-back, an old replica peeks the key under S: the key is
// in debt, not marked (not the documented exception of an old replica
// reading a mark), and under the same limit, so the old script carries it
// into the same parameters, the same balance, but writes it untracked
// with the PX of its own refill (250 ms), not the mark's (1 s). At 400 ms
// the key is gone; L reads full and admits 10 (16 in all), where the
// model (the refused take never happened: the mark, 4 under L, lives a
// second) admits 4.
func TestReview6OldScriptEndsMarkedRun(t *testing.T) {
	old, err := os.ReadFile("testdata/script-3fae337.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range trackedStores(t) {
		ctx := context.Background()
		L := rls.Hit{Key: "oemr", Capacity: 10, Count: 0, Period: time.Hour, N: 6}
		S := rls.Hit{Key: "oemr", Capacity: 4, Count: 4, Period: time.Second, N: 1}
		if a, _, _, _, err := st.s.TakeReqForTest(ctx, []rls.Hit{L}); err != nil || !a {
			t.Fatalf("%s: L 6: %v %v", st.name, a, err)
		}
		ok, _, gb, tk, err := st.s.TakeReqForTest(ctx, []rls.Hit{S})
		if err != nil || !ok || gb.N != 1 {
			t.Fatalf("%s: S 1: %v %v %d", st.name, ok, err, gb.N)
		}
		peek := S
		peek.N = 0
		raw, _ := st.c.Get(ctx, st.pfx+"oemr").Result()
		runOldOn(t, st.c, string(old), st.pfx, peek)
		raw2, _ := st.c.Get(ctx, st.pfx+"oemr").Result()
		time.Sleep(400 * time.Millisecond)
		giveBack(t, st.s, gb, tk)
		admitted := int64(6)
		L.N = 1
		for range 10 {
			if a, _ := decide1(t, st.s, L); a {
				admitted++
			}
		}
		if admitted > 10 {
			t.Errorf("%s: %d admitted under a burst of 10 that never refills, want at most 10 (an old replica's peek under the same limit rewrote the marked run %q as %q)", st.name, admitted, raw, raw2)
		}
	}
}

// TestReview6RaisedLimitAfterUpgrade (passes: the run's key expires when
// refilled, so the raise finds it absent): a key in debt written by the script
// from before the mark (a replica before a rolling upgrade) is read by
// this one as a run begun at a mark (the cautious reading), and its run
// bit is never cleared while requests keep the key busy: burst 10 at 10 a
// second, 1 taken every 150 ms for 1.5 s, then full again (300 ms idle).
// The rule is then raised to 100 an hour, burst 100: a full bucket stays
// full (docs/rls.md), and memory admits 100; the tracked store carries the
// refilled run as a mark, 10 of 100, 90 short for most of an hour.
func TestReview6RaisedLimitAfterUpgrade(t *testing.T) {
	old, err := os.ReadFile("testdata/script-3fae337.lua")
	if err != nil {
		t.Fatal(err)
	}
	type st struct {
		name string
		s    rls.Store
		c    redis.UniversalClient
		pfx  string
	}
	stores := []st{{name: "memstore", s: memstore.New()}}
	for _, x := range trackedStores(t) {
		stores = append(stores, st{x.name, x.s, x.c, x.pfx})
	}
	got := map[string]int{}
	for _, x := range stores {
		L := rls.Hit{Key: "rlu", Capacity: 10, Count: 10, Period: time.Second, N: 1}
		if x.c != nil {
			if !runOldOn(t, x.c, string(old), x.pfx, L) {
				t.Fatalf("%s: old L 1 refused", x.name)
			}
		} else if a, _ := decide1(t, x.s, L); !a {
			t.Fatalf("%s: L 1 refused", x.name)
		}
		end := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(end) {
			if a, _ := decide1(t, x.s, L); !a {
				t.Fatalf("%s: L 1 refused", x.name)
			}
			time.Sleep(150 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		if x.c != nil {
			raw, _ := x.c.Get(context.Background(), x.pfx+"rlu").Result()
			t.Logf("%s: before the raise %q", x.name, raw)
		}
		R := rls.Hit{Key: "rlu", Capacity: 100, Count: 100, Period: time.Hour, N: 1}
		n := 0
		for range 100 {
			if a, _ := decide1(t, x.s, R); a {
				n++
			}
		}
		got[x.name] = n
	}
	for _, x := range stores[1:] {
		if got[x.name] < got["memstore"] {
			t.Errorf("%s: raised to a burst of 100, a full key admits %d, memory %d", x.name, got[x.name], got["memstore"])
		}
	}
}

// TestReview6RunBitNeverClears: the run bit of a key whose run began at a
// mark is cleared only when the key is absent, so its key's expiry says
// how long the mark's limit stays; the same cause as
// TestReview6BusyMarkedRunStaysMark (the mark's run inherited the plain L
// bucket's 6-minute PTTL), with takes that keep the key in debt. Fails
// before the fix (5 of 10, memory 10), passes after. A
// key of burst 10 at 10 an hour (L) has 9 left; S (burst 5, 5 a second)
// clamps it (a mark) and takes 1 every 190 ms for 4 s, just within S's
// rate (every take admitted), so the key is never absent. 800 ms after the
// last take S is full again, and memory, whose refilled bucket is full,
// admits 10 under L; the tracked store carries the refilled run as the
// mark, 5 of 10, 3 s after the mark (a fill from empty, 1 s) would have
// expired, and 5 short for half an hour (L's refill). The docs: "keeps the
// mark's limit on the key until the mark would have expired".
func TestReview6RunBitNeverClears(t *testing.T) {
	type st struct {
		name string
		s    rls.Store
	}
	stores := []st{{"memstore", memstore.New()}}
	for _, x := range trackedStores(t) {
		stores = append(stores, st{x.name, x.s})
	}
	got := map[string]int{}
	for _, x := range stores {
		L := rls.Hit{Key: "rbn", Capacity: 10, Count: 10, Period: time.Hour, N: 1}
		S := rls.Hit{Key: "rbn", Capacity: 5, Count: 5, Period: time.Second, N: 1}
		if a, _ := decide1(t, x.s, L); !a {
			t.Fatalf("%s: L 1 refused", x.name)
		}
		end := time.Now().Add(4 * time.Second)
		for time.Now().Before(end) {
			if a, _ := decide1(t, x.s, S); !a {
				t.Fatalf("%s: S 1 refused", x.name)
			}
			time.Sleep(190 * time.Millisecond)
		}
		time.Sleep(800 * time.Millisecond)
		n := 0
		for range 10 {
			if a, _ := decide1(t, x.s, L); a {
				n++
			}
		}
		got[x.name] = n
	}
	for _, x := range stores[1:] {
		if got[x.name] < got["memstore"] {
			t.Errorf("%s: L admits %d of 10 after S's takes refilled, memory %d: the busy key keeps the mark's limit 3 s after the mark would have expired", x.name, got[x.name], got["memstore"])
		}
	}
}
