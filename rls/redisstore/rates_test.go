package redisstore_test

// A differential walk of one key under four limits of different bursts AND
// rates (two share burst 5 with different rates), with debt hits, shadow
// hits, a second key, and time passing: memstore on a fake clock, Redis
// aged by rewriting every key's tick and expiry, against a model in
// half-tokens. Total aging stays below the smallest fill time, so no mark
// expires (the documented difference between memory and Redis).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
	"github.com/admit-go/admit/rls/redisstore"
	"github.com/redis/go-redis/v9"
)

// rmodel: balance in half tokens, the limit it is under, whether it is
// full (not only by a clamp); absent keys are full.
type rkey struct {
	bal       int64
	cap, rate int64
	full      bool
}

type rmodel map[string]*rkey

func (m rmodel) age(halfHours int64) {
	for _, k := range m {
		for range halfHours {
			if k.full {
				continue
			}
			if k.bal < 2*k.cap && k.rate > 0 {
				k.bal = min(2*k.cap, k.bal+k.rate)
				if k.bal == 2*k.cap {
					k.full = true
				}
			}
		}
	}
}

func (m rmodel) decide(hits []rls.Hit) (bool, []bool) {
	admitted, ok, _ := m.run(hits, nil, false)
	return admitted, ok
}

// forced runs hits with the store's outcomes: each hit held as held says,
// the request admitted as admitted says. It reports whether the model
// could hold every hit the store held (false: the store had more).
func (m rmodel) forced(hits []rls.Hit, admitted bool, held []bool) bool {
	_, _, good := m.run(hits, held, admitted)
	return good
}

// run applies hits. With held nil it decides them: a hit holds when its
// key has its cost, the request is admitted when every enforced hit held.
// Otherwise held and admitted are the outcomes, and good reports whether
// the model could hold every hit held says.
func (m rmodel) run(hits []rls.Hit, held []bool, admitted bool) (bool, []bool, bool) {
	type st struct {
		all, dbt         int64
		fullAll, fullDbt bool
		cap, rate        int64
	}
	work := map[string]*st{}
	ok := make([]bool, len(hits))
	decided, good := true, true
	for i, h := range hits {
		s := work[h.Key]
		if s == nil {
			k := m[h.Key]
			if k == nil || k.full {
				s = &st{all: 2 * h.Capacity, dbt: 2 * h.Capacity, fullAll: true, fullDbt: true, cap: h.Capacity, rate: h.Count}
			} else {
				s = &st{all: k.bal, dbt: k.bal, cap: k.cap, rate: k.rate}
			}
			work[h.Key] = s
		}
		if s.cap != h.Capacity || s.rate != h.Count {
			cp := func(b int64, full bool) int64 {
				if full {
					return 2 * h.Capacity
				}
				if h.Count == 0 {
					b -= ((b % 2) + 2) % 2 // a limit that never refills has whole tokens (Per 1): the fraction is dropped
				}
				return max(-2*h.Capacity, min(b, 2*h.Capacity))
			}
			s.all, s.dbt = cp(s.all, s.fullAll), cp(s.dbt, s.fullDbt)
			s.cap, s.rate = h.Capacity, h.Count
		}
		can := h.N >= 0 && h.N <= h.Capacity && 2*h.N <= s.all
		ok[i] = can
		if held != nil {
			good = good && (can || !held[i])
			ok[i] = held[i]
		}
		switch {
		case h.Debt && h.N >= 0:
			s.all = max(-2*h.Capacity, s.all-2*h.N)
			s.dbt = max(-2*h.Capacity, s.dbt-2*h.N)
		case ok[i]:
			s.all -= 2 * h.N
		}
		s.fullAll = s.fullAll && s.all == 2*s.cap
		s.fullDbt = s.fullDbt && s.dbt == 2*s.cap
		decided = decided && (ok[i] || h.Shadow)
	}
	if held != nil {
		decided = admitted
	}
	for k, s := range work {
		b, f := s.dbt, s.fullDbt
		if decided {
			b, f = s.all, s.fullAll
		}
		m[k] = &rkey{bal: b, cap: s.cap, rate: s.rate, full: f}
	}
	return decided, ok, good
}

// ageRedis moves every key under pfx back by d: its tick by d/q, its
// expiry by d (deleted if that passes it).
func ageRedis(t *testing.T, c redis.UniversalClient, pfx string, d time.Duration) {
	ageKeys(t, c, pfx, d, false)
}

// ageRedisVersions is ageRedis that moves a tracked key's version back by
// d too (its points and receipts are ages from it), so that the horizon
// sees the time passed: a walk that compares a tracked store with memory
// across ageing, with no give-back pending, needs it.
func ageRedisVersions(t *testing.T, c redis.UniversalClient, pfx string, d time.Duration) {
	ageKeys(t, c, pfx, d, true)
}

func ageKeys(t *testing.T, c redis.UniversalClient, pfx string, d time.Duration, versions bool) {
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
			f := strings.SplitN(v, " ", 3)
			// f[2]: the sig, then a tracked key's version and points
			sig := strings.Split(strings.Fields(strings.TrimSuffix(f[2], ":c"))[0], ":")
			q, _ := strconv.ParseInt(sig[3], 10, 64)
			tk, _ := strconv.ParseInt(f[1], 10, 64)
			rest := f[2]
			if versions {
				if rest, err = ageVersion(rest, d); err != nil {
					return fmt.Errorf("key %q: %w", k, err)
				}
			}
			nv := f[0] + " " + strconv.FormatInt(tk-d.Microseconds()/q, 10) + " " + rest
			switch {
			case pt < 0:
				err = n.Set(ctx, k, nv, 0).Err()
			case pt-d <= 0:
				err = n.Del(ctx, k).Err()
			default:
				err = n.Set(ctx, k, nv, pt-d).Err()
			}
			if err != nil {
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
}

// ageVersion moves the version in "sig ver[bits] points…" back by d; an
// untracked key's "sig" comes back as it is.
func ageVersion(rest string, d time.Duration) (string, error) {
	sig, after, ok := strings.Cut(rest, " ")
	if !ok {
		return rest, nil
	}
	vt, tail, _ := strings.Cut(after, " ")
	bits := strings.TrimLeft(vt, "0123456789")
	ver, err := strconv.ParseInt(strings.TrimSuffix(vt, bits), 10, 64)
	if err != nil {
		return "", fmt.Errorf("version %q: %w", vt, err)
	}
	out := sig + " " + strconv.FormatInt(ver-d.Microseconds(), 10) + bits
	if tail != "" {
		out += " " + tail
	}
	return out, nil
}

func testRatesTime(t *testing.T, split bool, seeds uint64) {
	lims := []rls.Hit{rh("", 10, 0, 0), rh("", 5, 1, 0), rh("", 7, 2, 0), rh("", 5, 2, 0)}
	ctx := context.Background()
	sc := redis.NewClient(&redis.Options{Addr: single.Addr, ContextTimeoutEnabled: true})
	defer sc.Close()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	defer cc.Close()
	bad := map[string]int{}
	shown := 0
	for seed := range seeds {
		r := rand.New(rand.NewPCG(seed, 23))
		key, other := fmt.Sprintf("{rt%d}", seed), fmt.Sprintf("{rt%d}-o", seed)
		if split {
			other = otherMaster(t, cc, "", fmt.Sprintf("rt%d", seed)) // may differ under a prefix; checked below
			key = fmt.Sprintf("rt%d", seed)
		}
		clk := buckettest.NewFakeClock(time.Now().UnixNano())
		ms := memstore.New(memstore.WithClock(clk))
		sp, cp := newPrefix(), newPrefix()
		ss, _ := redisstore.New(sc, redisstore.WithPrefix(sp))
		cs, _ := redisstore.New(cc, redisstore.WithPrefix(cp))
		if split {
			other = otherMaster(t, cc, cp, key)
		}
		stores := []struct {
			name string
			s    rls.Store
		}{{"memstore", ms}, {"redis-single", ss}, {"redis-cluster", cs}}
		m := rmodel{}
		var log []string
		aged := int64(0)
		first := map[string]bool{}
		for step := range 24 {
			if aged < 4 && r.IntN(5) == 0 {
				aged++
				clk.Advance(30 * time.Minute)
				ageRedis(t, sc, sp, 30*time.Minute)
				ageRedisVersions(t, cc, cp, 30*time.Minute)
				m.age(1)
				log = append(log, "age 30m")
				continue
			}
			req := randomHits(r, key, lims, 8, 2)
			if r.IntN(3) == 0 {
				req = append(req, rh(other, 1, 0, int64(r.IntN(2))))
			}
			am, okm := m.decide(req)
			line := fmt.Sprintf("#%d %s %s model=%v%v(bal/2=%+v)", step, fmtReq(req), fmtRate(req), am, okm, *m[key])
			for _, b := range stores {
				res := make([]rls.Result, len(req))
				a, err := b.s.Decide(ctx, req, res)
				if err != nil {
					t.Fatal(err)
				}
				oks := make([]bool, len(req))
				for i := range res {
					oks[i] = res[i].OK
				}
				rem := []int64{}
				for i := range res {
					rem = append(rem, res[i].Remaining)
				}
				line += fmt.Sprintf(" %s=%v%v%v", b.name, a, oks, rem)
				if (a != am || fmt.Sprint(oks) != fmt.Sprint(okm)) && !first[b.name] {
					first[b.name] = true
					bad[b.name]++
					line += "<-"
				}
			}
			log = append(log, line)
		}
		if len(first) > 0 && shown < 3 {
			shown++
			t.Errorf("seed %d (split %v): divergence from the model:\n%s", seed, split, strings.Join(log, "\n"))
		} else if os.Getenv("RATES_TRACE") == fmt.Sprint(seed) {
			t.Logf("seed %d:\n%s", seed, strings.Join(log, "\n"))
		}
	}
	t.Logf("sequences diverging from the model, of %d: %v", seeds, bad)
}

func fmtRate(r []rls.Hit) string {
	var b strings.Builder
	for _, h := range r {
		fmt.Fprintf(&b, "%d/h ", h.Count)
	}
	return b.String()
}

func TestRatesTime(t *testing.T) { testRatesTime(t, false, 400) }

// TestOddRatesDiff: rates whose half hour is no whole half token
// (5 per 2 h, 3 an hour, 7 per 90 min), differential only: memstore and a
// single Redis must decide alike and report the same Remaining.
func TestOddRatesDiff(t *testing.T) {
	lims := []rls.Hit{
		{Capacity: 10, Count: 0, Period: time.Hour}, {Capacity: 5, Count: 5, Period: 2 * time.Hour},
		{Capacity: 7, Count: 3, Period: time.Hour}, {Capacity: 5, Count: 7, Period: 90 * time.Minute},
		{Capacity: 12, Count: 1, Period: 7 * time.Minute},
	}
	ctx := context.Background()
	sc := redis.NewClient(&redis.Options{Addr: single.Addr, ContextTimeoutEnabled: true})
	defer sc.Close()
	bad := 0
	for seed := range uint64(400) {
		r := rand.New(rand.NewPCG(seed, 29))
		key, other := fmt.Sprintf("od%d", seed), fmt.Sprintf("od%d-o", seed)
		clk := buckettest.NewFakeClock(time.Now().UnixNano())
		ms := memstore.New(memstore.WithClock(clk))
		sp := newPrefix()
		ss, _ := redisstore.New(sc, redisstore.WithPrefix(sp))
		var log []string
		aged := 0
		differ := false
		for step := range 24 {
			if aged < 3 && r.IntN(5) == 0 {
				aged++
				d := time.Duration(1+r.IntN(40)) * time.Minute
				clk.Advance(d)
				ageRedis(t, sc, sp, d)
				log = append(log, fmt.Sprint("age ", d))
				continue
			}
			req := randomHits(r, key, lims, 8, 2)
			if r.IntN(3) == 0 {
				req = append(req, rh(other, 1, 0, int64(r.IntN(2))))
			}
			r1, r2 := make([]rls.Result, len(req)), make([]rls.Result, len(req))
			a1, err1 := ms.Decide(ctx, req, r1)
			a2, err2 := ss.Decide(ctx, req, r2)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			line := fmt.Sprintf("#%d %s mem=%v %v redis=%v %v", step, fmtReq(req), a1, r1, a2, r2)
			same := a1 == a2
			for i := range r1 {
				same = same && r1[i].OK == r2[i].OK && r1[i].Remaining == r2[i].Remaining
			}
			if !same && !differ {
				differ = true
				line += " <-"
			}
			log = append(log, line)
		}
		if differ {
			bad++
			if bad <= 2 {
				t.Errorf("seed %d: memstore and redis-single differ:\n%s", seed, strings.Join(log, "\n"))
			}
		}
	}
	t.Logf("%d of 400 sequences differ", bad)
}
func TestRatesTimeSplit(t *testing.T) { testRatesTime(t, true, 400) }
