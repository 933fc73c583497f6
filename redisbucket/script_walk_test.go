package redisbucket_test

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
	"github.com/redis/go-redis/v9"
)

// rvLimit is a limit as the script sees it.
type rvLimit struct {
	name               string
	capacity           int64
	rate               float64
	cap, per, m, q     int64
	head, packedParams string
}

func rvMake(name string, capacity int64, rate float64) (rvLimit, bool) {
	lim := admit.Limit{Name: name, Capacity: capacity, Rate: rate}
	rec, ok := record(lim, 0)
	if !ok {
		return rvLimit{}, false
	}
	recs, _ := redisbucket.Decode(rec)
	r := recs[0]
	head := rec[:len(rec)-16]
	return rvLimit{name, capacity, rate, r.Cap, r.Per, r.M, r.Q, head, head[len(head)-32:]}, true
}

var rvCarries, rvCarryTicks int

type rvRec struct {
	cap, per, m, q int64
	d, t           int64
}

const rvNever = int64(1) << 53

func rvAdv(d, t, m, now int64) (int64, int64) {
	if now > t {
		if m > 0 {
			dt := now - t
			if dt > d/m+1 {
				d = 0
			} else {
				d = max(0, d-dt*m)
			}
		}
		t = now
	}
	return d, t
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// rvUpto: µs from us until tick T on ticks of q µs, capped at NEVER.
func rvUntil(T, q, us int64) int64 {
	// T*q may overflow int64 for absurd values; use float guard.
	if float64(T)*float64(q)-float64(us) >= float64(rvNever) {
		return rvNever
	}
	w := T*q - us
	if w >= rvNever {
		return rvNever
	}
	return w
}

type rvModel struct {
	recs  map[string]rvRec
	order []string
	when  int64 // expiry in ms (absolute), -1 none
}

// call is the exact model of one script call at server time us.
func (md *rvModel) call(limits []rvLimit, n, want int64, strict bool, us int64) (reply []int64, errIdx int) {
	if md.when >= 0 && us/1000 > md.when {
		md.recs, md.order, md.when = map[string]rvRec{}, nil, -1
	}
	k := len(limits)
	D, T := make([]int64, k), make([]int64, k)
	changed := false
	inCall := map[string]bool{}
	if strict {
		for j, l := range limits {
			if r, ok := md.recs[l.name]; ok && (r.cap != l.cap || r.per != l.per || r.m != l.m || r.q != l.q) {
				return nil, j + 1
			}
		}
	}
	for j, l := range limits {
		inCall[l.name] = true
		now := us / l.q
		r, ok := md.recs[l.name]
		switch {
		case !ok:
			D[j], T[j] = 0, now
		case r.cap == l.cap && r.per == l.per && r.m == l.m && r.q == l.q:
			D[j], T[j] = rvAdv(r.d, r.t, l.m, now)
		default:
			od, ot := rvAdv(r.d, r.t, r.m, us/r.q)
			bal := r.cap - od
			whole := bal / r.per
			if od == 0 || whole >= l.capacity {
				D[j] = 0
			} else {
				f := bal - whole*r.per
				var part int64
				if float64(f)*float64(l.per) < float64(rvNever) {
					part = f * l.per / r.per
				} else {
					part = max(0, int64(math.Floor(float64(f)/float64(r.per)*float64(l.per)))-1)
				}
				D[j] = l.cap - (whole*l.per + part)
			}
			T[j] = max(ceilDiv(ot*r.q, l.q), ceilDiv(us, l.q))
			changed = true
			rvCarries++
			if r.q != l.q {
				rvCarryTicks++
			}
		}
	}
	ok := true
	retry, worst := int64(0), 0
	avail := want
	for j, l := range limits {
		a := l.cap - D[j]
		if a < n*l.per {
			ok = false
			w := rvNever
			if l.m > 0 {
				w = rvUntil(T[j]+ceilDiv(n*l.per-a, l.m), l.q, us)
			}
			if w > retry {
				retry, worst = w, j
			}
		} else {
			avail = min(avail, a/l.per)
		}
	}
	taken := int64(0)
	if ok && n > 0 {
		taken = avail
	}
	rem, fewest, reset := int64(-1), 0, int64(0)
	for j, l := range limits {
		if taken > 0 {
			D[j] += taken * l.per
			now := us / l.q
			if l.q > 1 && T[j] == now && us > now*l.q {
				T[j] = now + 1
			}
		}
		w := (l.cap - D[j]) / l.per
		if rem < 0 || w < rem {
			rem, fewest = w, j
		}
		reset = max(reset, rvFull(D[j], T[j], l.m, l.q, us))
	}
	if ok {
		worst = fewest
	}
	if taken > 0 || changed {
		ttl := reset
		nrecs := map[string]rvRec{}
		var order []string
		for j, l := range limits {
			if D[j] > 0 {
				nrecs[l.name] = rvRec{l.cap, l.per, l.m, l.q, D[j], T[j]}
				order = append(order, l.name)
			}
		}
		for _, name := range md.order {
			if inCall[name] {
				continue
			}
			r := md.recs[name]
			d, t := rvAdv(r.d, r.t, r.m, us/r.q)
			if d > 0 {
				nrecs[name] = r
				order = append(order, name)
				ttl = max(ttl, rvFull(d, t, r.m, r.q, us))
			}
		}
		md.recs, md.order = nrecs, order
		switch {
		case len(order) == 0:
			md.when = -1
		case ttl < 1<<50:
			md.when = us/1000 + ceilDiv(ttl, 1000)
		default:
			md.when = -1
		}
	}
	if retry >= rvNever {
		retry = -1
	}
	if reset >= rvNever {
		reset = -1
	}
	a := int64(0)
	if ok {
		a = 1
	}
	return []int64{a, rem, retry, reset, taken, int64(worst + 1)}, 0
}

func rvFull(d, t, m, q, us int64) int64 {
	if d == 0 {
		return 0
	}
	if m == 0 {
		return rvNever
	}
	return rvUntil(t+ceilDiv(d, m), q, us)
}

// TestScriptModelWalk drives the script (on a fixed server clock) through
// random walks of AllowLimits-style calls over Names whose limits change
// between every tick size, against an exact model of the documented
// semantics: replies, stored records and expiry must match.
func TestScriptModelWalk(t *testing.T) {
	fast := redis.NewScript(fixedTime + redisbucket.ScriptSource)
	c := client(t, srv)
	ctx := context.Background()
	base := serverTime(t, c) + 86_400_000_000*3
	type cr struct {
		c int64
		r float64
	}
	shapes := []cr{
		{1, 1}, {3, 3}, {5, 0.5}, {10, 1e9}, {1000, 1e-6}, {7, 0}, {3, 1.0 / 3}, {100, 7.7},
		{1e4, 1e-6}, {1e5, 1e-6}, {1e6, 1e-6}, {1e9, 1e-6}, {1e9, 1e-3}, {1 << 31, 1e-6},
		{1 << 45, 1000}, {1 << 50, 3}, {1 << 48, 1e9}, {1 << 52, 1e6}, {2, 1e6}, {20, 1000}, {4503, 1e-6}, {4504, 1e-6}, {1 << 31, 0.1}, {1 << 40, 1.0 / 7},
	}
	var pool []cr
	for _, s := range shapes {
		if _, ok := rvMake("x", s.c, s.r); ok {
			pool = append(pool, s)
		}
	}
	seeds := 100
	if s := os.Getenv("REDISBUCKET_WALKS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	names := []string{"a", "b", "c"}
	if os.Getenv("REDISBUCKET_WALK_NAMES") != "" {
		names = []string{"", "1:x", "a:", strings.Repeat("\x00:9", 20), "b", "2"}
	}
	stats := map[string]int{}
	defer func() { t.Logf("stats %v carries %d across ticks %d", stats, rvCarries, rvCarryTicks) }()
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		key := fmt.Sprint("t:review:walk:", seed)
		c.Del(ctx, key)
		md := &rvModel{recs: map[string]rvRec{}, when: -1}
		us := base + rng.Int64N(1_000_000_000)
		// Each Name keeps a current shape most of the time.
		cur := map[string]cr{}
		for _, nm := range names {
			cur[nm] = pool[rng.IntN(len(pool))]
		}
		var trace []string
		ideal := map[string]*big.Rat{}     // exact balance in tokens, per Name
		idealCap := map[string]int64{}     // its capacity
		idealRate := map[string]*big.Rat{} // its rate per µs
		last := int64(-1)
		stepped := false
		for step := range 60 {
			// time
			switch rng.IntN(9) {
			case 8:
				// onto a tick boundary of 10^k µs, or one µs either side
				q := []int64{10, 100, 1000, 10_000, 100_000, 1_000_000}[rng.IntN(6)]
				prev := us
				us = (us/q+1)*q + rng.Int64N(3) - 1
				stepped = stepped || us < prev
			case 0:
			case 1:
				us += rng.Int64N(3)
			case 2:
				us += rng.Int64N(2000)
			case 3:
				us += rng.Int64N(2_000_000)
			case 4:
				us += rng.Int64N(1_000_000_000)
			case 5:
				us -= rng.Int64N(2_000_000) // clock stepped back
				stepped = true
			case 6:
				prev := us
				us = (us/1_000_000+1)*1_000_000 - rng.Int64N(3) // near a second boundary
				stepped = stepped || us < prev
			case 7:
				us += rng.Int64N(1 << 40)
			}
			if rng.IntN(4) == 0 {
				nm := names[rng.IntN(len(names))]
				cur[nm] = pool[rng.IntN(len(pool))]
			}
			perm := rng.Perm(len(names))
			k := 1 + rng.IntN(len(names))
			var limits []rvLimit
			minCap := int64(math.MaxInt64)
			for _, i := range perm[:k] {
				s := cur[names[i]]
				l, _ := rvMake(names[i], s.c, s.r)
				limits = append(limits, l)
				minCap = min(minCap, s.c)
			}
			var n int64
			switch rng.IntN(6) {
			case 0:
				n = 0
			case 1:
				n = 1
			case 2:
				n = minCap
			case 3:
				n = max(0, minCap-1)
			default:
				n = rng.Int64N(minCap + 1)
			}
			want := n
			if rng.IntN(5) == 0 {
				want = n + rng.Int64N(minCap+1)
			}
			strict := rng.IntN(10) == 0
			var heads, params strings.Builder
			for _, l := range limits {
				heads.WriteString(l.head)
				params.WriteString(l.packedParams)
			}
			flag := "0"
			if strict {
				flag = "1"
			}
			// Expiry: the model deletes; emulate on Redis by deleting too.
			if md.when >= 0 && us/1000 > md.when {
				c.Del(ctx, key)
			}
			argv := []any{n, want, flag, heads.String(), params.String(), us / 1_000_000, us % 1_000_000, us / 1000}
			res, err := fast.Run(ctx, c, []string{key}, argv...).Int64Slice()
			desc := fmt.Sprintf("step %d us=%d n=%d want=%d strict=%v limits=", step, us, n, want, strict)
			for _, l := range limits {
				desc += fmt.Sprintf("[%s cap=%d rate=%v (C=%d P=%d M=%d Q=%d)]", l.name, l.capacity, l.rate, l.cap, l.per, l.m, l.q)
			}
			trace = append(trace, desc)
			before := fmt.Sprint(md.recs)
			wantRes, errIdx := md.call(limits, n, want, strict, us)
			fail := func(format string, a ...any) {
				t.Helper()
				t.Fatalf("seed %d: %s\nmodel before: %s\ntrace:\n%s", seed, fmt.Sprintf(format, a...), before, strings.Join(trace, "\n"))
			}
			if errIdx > 0 {
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("ADMITPARAMS %d ", errIdx)) {
					fail("got %v, %v; want ADMITPARAMS %d", res, err, errIdx)
				}
			} else if err != nil || !reflect.DeepEqual(res, wantRes) {
				fail("got %v, %v; want %v", res, err, wantRes)
			}
			if errIdx > 0 {
				stats["strictErr"]++
			} else {
				stats[fmt.Sprintf("allowed=%d", wantRes[0])]++
				if wantRes[4] > n {
					stats["batch"]++
				}
				if wantRes[2] > 0 {
					stats["retry>0"]++
				}
				if len(limits) > 1 {
					stats["multi"]++
				}
			}
			if errIdx == 0 && !stepped {
				// The ideal bucket: real-valued, the configured rate.
				if last >= 0 {
					for nm, b := range ideal {
						b.Add(b, new(big.Rat).Mul(idealRate[nm], big.NewRat(us-last, 1)))
						if b.Cmp(big.NewRat(idealCap[nm], 1)) > 0 {
							b.SetInt64(idealCap[nm])
						}
					}
				}
				last = us
				for _, l := range limits {
					b, ok := ideal[l.name]
					rt, _ := new(big.Rat).SetString(strconv.FormatFloat(l.rate, 'g', -1, 64))
					rt.Quo(rt, big.NewRat(1_000_000, 1))
					if !ok {
						b = big.NewRat(l.capacity, 1)
					} else if idealCap[l.name] != l.capacity || idealRate[l.name].Cmp(rt) != 0 {
						if b.Cmp(big.NewRat(idealCap[l.name], 1)) == 0 || b.Cmp(big.NewRat(l.capacity, 1)) > 0 {
							b = big.NewRat(l.capacity, 1)
						}
					}
					b.Sub(b, big.NewRat(wantRes[4], 1))
					ideal[l.name], idealCap[l.name], idealRate[l.name] = b, l.capacity, rt
					stats["ideal checks"]++
					// The script's balance after the call.
					var sb *big.Rat
					if r, ok := md.recs[l.name]; ok {
						sb = big.NewRat(r.cap-r.d, r.per)
					} else {
						sb = big.NewRat(l.capacity, 1)
					}
					if sb.Cmp(b) > 0 {
						fail("Name %s: script balance %s above the ideal %s", l.name, sb.FloatString(6), b.FloatString(6))
					}
				}
			}
			if errIdx == 0 {
				cur, _ := c.Get(ctx, key).Result()
				probe := func(at, pn int64) []int64 {
					t.Helper()
					sk := key + ":probe"
					c.Del(ctx, sk)
					if cur != "" {
						c.Set(ctx, sk, cur, 0)
					}
					pv := []any{pn, pn, "0", heads.String(), params.String(), at / 1_000_000, at % 1_000_000, at / 1000}
					r, err := fast.Run(ctx, c, []string{sk}, pv...).Int64Slice()
					if err != nil {
						fail("probe at %d n=%d: %v", at, pn, err)
					}
					return r
				}
				rem, retry, reset := wantRes[1], wantRes[2], wantRes[3]
				if wantRes[0] == 0 && retry >= 0 && retry < 1<<45 {
					stats["probe retry"]++
					if r := probe(us+retry, n); r[0] != 1 {
						fail("retry %d: at us+retry, n=%d: %v", retry, n, r)
					}
					if r := probe(us+retry-1, n); r[0] != 0 {
						fail("retry %d: at us+retry-1, n=%d: %v", retry, n, r)
					}
				}
				if reset >= 0 && reset < 1<<45 {
					stats["probe reset"]++
					if r := probe(us+reset, 0); r[3] != 0 || r[1] != minCap && len(limits) == 1 {
						fail("reset %d: peek at us+reset: %v", reset, r)
					}
					if reset > 0 {
						if r := probe(us+reset-1, 0); r[3] != 1 {
							fail("reset %d: peek at us+reset-1: %v", reset, r)
						}
					}
				}
				if rem+1 <= minCap {
					if r := probe(us, rem+1); r[0] != 0 {
						fail("remaining %d: n=%d at once: %v", rem, rem+1, r)
					}
				}
				if rem >= 1 {
					if r := probe(us, rem); r[0] != 1 {
						fail("remaining %d: n=%d at once: %v", rem, rem, r)
					}
				}
			}
			v, _ := c.Get(ctx, key).Result()
			recs, okp := redisbucket.Decode(v)
			if !okp {
				fail("stored %x does not parse", v)
			}
			got := map[string]rvRec{}
			for _, r := range recs {
				got[r.Name] = rvRec{r.Cap, r.Per, r.M, r.Q, r.D, r.T}
			}
			if !reflect.DeepEqual(got, md.recs) && !(len(got) == 0 && len(md.recs) == 0) {
				fail("stored %v, model %v", got, md.recs)
			}
			exp, _ := c.Do(ctx, "PEXPIRETIME", key).Int64()
			wantExp := md.when
			if len(md.recs) == 0 {
				wantExp = -2
			}
			if exp != wantExp {
				fail("PEXPIRETIME %d, model %d", exp, wantExp)
			}
		}
		c.Del(ctx, key)
	}
}

// TestCarryRounding: a carry-over rounds the balance down to a whole
// unit of the new limit, 1/per of a token. The docs said "by less than a
// millionth of a token", which holds only where the new per is at least
// 1e6 (rates up to 1/s); at 1e6/s per is 1, and 2.5 tokens carry over as 2.
// The loss is always under one tick of the new limit's refill (q/m µs),
// which is what the docs now say.
func TestCarryRounding(t *testing.T) {
	s := redis.NewScript(fixedTime + redisbucket.ScriptSource)
	c := client(t, srv)
	ctx := context.Background()
	us := serverTime(t, c) + 86_400_000_000
	old, _ := rvMake("p", 10, 3)  // per 1e6, 1 µs ticks
	nw, _ := rvMake("p", 10, 1e6) // per 1, m 1
	if old.per != 1_000_000 || nw.per != 1 || nw.m != 1 || nw.q != 1 {
		t.Fatalf("units: old %+v new %+v", old, nw)
	}
	key := "t:review:carry"
	c.Del(ctx, key)
	// 2.5 tokens left under the old limit, as of now.
	rec, _, _ := redisbucket.Record(admit.Limit{Name: "p", Capacity: 10, Rate: 3}, old.cap-2_500_000, us)
	c.Set(ctx, key, rec, 0)
	res, err := s.Run(ctx, c, []string{key}, 0, 0, "0", nw.head, nw.packedParams, us/1_000_000, us%1_000_000, us/1000).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := redisbucket.Decode(c.Get(ctx, key).Val())
	if res[1] != 2 || len(recs) != 1 || recs[0].Cap-recs[0].D != 2 {
		t.Fatalf("2.5 tokens carried to per 1: reply %v, stored %+v; want 2 tokens (2 units)", res, recs)
	}
	// Lost: 0.5 tokens, half a microsecond of the new limit's refill.
}
