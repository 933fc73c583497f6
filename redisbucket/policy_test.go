package redisbucket_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/redisbucket"
	"github.com/redis/go-redis/v9"
)

// lim is a named limit.
func lim(name string, capacity int64, rate float64) admit.Limit {
	return admit.Limit{Name: name, Capacity: capacity, Rate: rate}
}

// allowL calls AllowLimits and fails t on an error.
func allowL(t *testing.T, l admit.PolicyLimiter, key string, n int64, limits ...admit.Limit) admit.Decision {
	t.Helper()
	d, err := l.AllowLimits(context.Background(), key, n, limits...)
	if err != nil {
		t.Fatalf("AllowLimits(%q, %d, %v): %v", key, n, limits, err)
	}
	return d
}

// frozen stores records for key whose time is an hour ahead of the
// server's clock, F: until then no refill applies (a reading before the
// stored time adds nothing), so a decision's numbers are exact functions
// of F and of the server time it was taken at, us. It returns F in µs.
func frozen(t *testing.T, c *redis.Client, l *redisbucket.Limiter, key string, debts map[admit.Limit]int64) int64 {
	t.Helper()
	f := serverTime(t, c) + 3600e6
	var recs []string
	for lm, tokens := range debts {
		_, per, q := redisbucket.Record(lm, 0, 0)
		if q != 1 {
			t.Fatalf("limit %v runs on %d µs ticks; the test wants 1 µs", lm, q)
		}
		rec, _, _ := redisbucket.Record(lm, tokens*per, f)
		recs = append(recs, rec)
	}
	if err := c.Set(context.Background(), redisbucket.RedisKey(l, key), redisbucket.Join(recs...), 0).Err(); err != nil {
		t.Fatal(err)
	}
	return f
}

// Denied, RetryAfter is the exact time until every limit holds n and
// Policy the limit that needs the longest; ResetAfter the time until every
// limit is full; all three from the same server reading. On frozen state
// RetryAfter = F + need − us and ResetAfter = F + fill − us for the same
// unknown us: their difference is exact, and each lies within the TIME
// readings around the call.
func TestPolicyExactRetryAfter(t *testing.T) {
	l, c, _ := newLimiter(t, 1, 1)
	burst, slowL := lim("burst", 2, 1), lim("slow", 4, 0.5) // 1 and 2 s per token
	us := time.Microsecond
	for _, tc := range []struct {
		name         string
		burst, slow  int64 // debts in tokens
		n            int64
		policy       string
		need, fill   time.Duration // from F
		limit, fewer int64
	}{
		// burst is empty and needs 2 s for 2 tokens; slow holds 2.
		{"burst needs longest", 2, 2, 2, "burst", 2 * time.Second, 4 * time.Second, 2, 0},
		// burst holds 1 and needs 1 s; slow holds 1 and needs 2 s.
		{"slow needs longest", 1, 3, 2, "slow", 2 * time.Second, 6 * time.Second, 4, 1},
		// Both hold n: allowed, and both left empty (burst first); slow's
		// 4 tokens of debt take 8 s.
		{"allowed", 0, 2, 2, "burst", 0, 8 * time.Second, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			f := frozen(t, c, l, key, map[admit.Limit]int64{burst: tc.burst, slowL: tc.slow})
			tb := serverTime(t, c)
			d := allowL(t, l, key, tc.n, burst, slowL)
			ta := serverTime(t, c)
			if d.Policy != tc.policy || d.Limit != tc.limit || d.Remaining != tc.fewer || d.Allowed != (tc.need == 0) {
				t.Errorf("%+v; want policy %q, limit %d, remaining %d", d, tc.policy, tc.limit, tc.fewer)
			}
			if tc.need > 0 && d.ResetAfter-d.RetryAfter != tc.fill-tc.need {
				t.Errorf("ResetAfter − RetryAfter = %v, want exactly %v", d.ResetAfter-d.RetryAfter, tc.fill-tc.need)
			}
			// The decision's reading lies in [tb, ta].
			lo, hi := time.Duration(f-ta)*us+tc.fill, time.Duration(f-tb)*us+tc.fill
			if d.ResetAfter < lo || d.ResetAfter > hi {
				t.Errorf("ResetAfter %v outside [%v, %v]", d.ResetAfter, lo, hi)
			}
		})
	}
	// One unit short: burst holds n tokens less one unit, which refills in
	// one µs. RetryAfter is 1 µs past F; with one unit more, allowed.
	per, _ := func() (int64, int64) { _, p, q := redisbucket.Record(burst, 0, 0); return p, q }()
	f := serverTime(t, c) + 3600e6
	short, _, _ := redisbucket.Record(burst, 1*per+1, f) // 1 token less one unit left
	if err := c.Set(context.Background(), redisbucket.RedisKey(l, "short"), short, 0).Err(); err != nil {
		t.Fatal(err)
	}
	tb := serverTime(t, c)
	d := allowL(t, l, "short", 1, burst, slowL)
	ta := serverTime(t, c)
	if d.Allowed || d.Policy != "burst" || d.RetryAfter < time.Duration(f-ta+1)*us || d.RetryAfter > time.Duration(f-tb+1)*us {
		t.Errorf("one unit short: %+v; want RetryAfter F + 1µs − now, in [%v, %v]", d, time.Duration(f-ta+1)*us, time.Duration(f-tb+1)*us)
	}
	exact, _, _ := redisbucket.Record(burst, 1*per, f) // exactly 1 token left
	if err := c.Set(context.Background(), redisbucket.RedisKey(l, "exact"), exact, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if d := allowL(t, l, "exact", 1, burst, slowL); !d.Allowed || d.Remaining != 0 || d.Policy != "burst" {
		t.Errorf("exactly n left: %+v; want allowed with 0 left", d)
	}
	// On the real clock: a caller that waits RetryAfter is admitted.
	fast, big := lim("fast", 5, 1000), lim("slow", 100, 0.5) // 1 token per ms
	if d := allowL(t, l, "wait", 5, fast, big); !d.Allowed {
		t.Fatalf("draining fast: %+v", d)
	}
	d = allowL(t, l, "wait", 3, fast, big)
	if d.Allowed || d.Policy != "fast" || d.RetryAfter <= 0 || d.RetryAfter > 3*time.Millisecond {
		t.Fatalf("fast drained: %+v; want a denial for at most 3ms", d)
	}
	time.Sleep(d.RetryAfter)
	if d := allowL(t, l, "wait", 3, fast, big); !d.Allowed {
		t.Errorf("after waiting RetryAfter: %+v; want allowed", d)
	}
}

// Rule 3 on the server's clock: a call that brings other parameters for a
// Name carries its balance over, advanced under the old rate, then clamped
// to the new capacity; the new rate applies from that call on, and the
// conversion is written even by a peek.
func TestPolicyCarryOver(t *testing.T) {
	ctx := context.Background()
	l, c, _ := newLimiter(t, 1, 1)
	x := lim("x", 10, 1)
	frozen(t, c, l, "k", map[admit.Limit]int64{x: 8}) // 2 left
	d := allowL(t, l, "k", 0, lim("x", 5, 1))
	if d.Remaining != 2 || d.Limit != 5 {
		t.Errorf("2 of 10 under capacity 5: %+v; want 2 left of 5", d)
	}
	want, _, _ := redisbucket.Record(lim("x", 5, 1), 3e6, 0)
	got, _ := redisbucket.Decode(c.Get(ctx, redisbucket.RedisKey(l, "k")).Val())
	w, _ := redisbucket.Decode(want)
	if len(got) != 1 || got[0].Name != w[0].Name || got[0].Cap != w[0].Cap || got[0].Per != w[0].Per || got[0].M != w[0].M || got[0].Q != w[0].Q || got[0].D != w[0].D {
		t.Errorf("stored after the peek: %+v; want the record converted, %+v (any time)", got, w)
	}
	if d := allowL(t, l, "k", 0, x); d.Remaining != 2 || d.Limit != 10 {
		t.Errorf("back at capacity 10: %+v; want the balance, 2, not a full bucket", d)
	}
	// Clamped: 4 left, then capacity 3.
	frozen(t, c, l, "clamp", map[admit.Limit]int64{x: 6})
	if d := allowL(t, l, "clamp", 0, lim("x", 3, 1)); d.Remaining != 3 || d.ResetAfter != 0 {
		t.Errorf("4 left clamped to capacity 3: %+v; want full at 3", d)
	}
	// Full at its capacity, the record is dropped like any full one (and
	// with it the key): a later capacity starts full, as for a Name never
	// used. (keyed forgets full keys too, at its own pace.)
	if n := c.Exists(ctx, redisbucket.RedisKey(l, "clamp")).Val(); n != 0 {
		t.Errorf("x clamped full is still stored: %q", c.Get(ctx, redisbucket.RedisKey(l, "clamp")).Val())
	}
	// Advanced under the old rate: rate 0 left for 30 ms adds nothing when
	// the next call brings 1000/s.
	zero := lim("z", 10, 0)
	if d := allowL(t, l, "z", 10, zero); !d.Allowed {
		t.Fatalf("drain: %+v", d)
	}
	time.Sleep(30 * time.Millisecond)
	if d := allowL(t, l, "z", 0, lim("z", 10, 1000)); d.Remaining != 0 {
		t.Errorf("rate 0 for 30 ms, then 1000/s: %+v; want 0 left (the old rate applied until now)", d)
	}
	// ... and the new rate applies from that call on: 1000/s for 30 ms,
	// then rate 0 for 30 ms adds nothing more.
	time.Sleep(30 * time.Millisecond)
	d = allowL(t, l, "z", 0, zero)
	if d.Remaining != 10 {
		t.Errorf("30 ms at 1000/s, capacity 10: %+v; want full at 10", d)
	}
	// A drained fast limit converted to rate 0: what it refilled until the
	// call stays, and nothing more comes.
	fast := lim("f", 1000, 1000)
	tb := serverTime(t, c)
	if d := allowL(t, l, "f", 1000, fast); !d.Allowed {
		t.Fatalf("drain: %+v", d)
	}
	time.Sleep(20 * time.Millisecond)
	d = allowL(t, l, "f", 0, lim("f", 1000, 0))
	ta := serverTime(t, c)
	if d.Remaining < 20 || d.Remaining > (ta-tb)/1000 || d.ResetAfter != redisbucket.Never {
		t.Errorf("20 ms at 1/ms, then rate 0: %+v; want in [20, %d] left, never full", d, (ta-tb)/1000)
	}
	time.Sleep(20 * time.Millisecond)
	if d2 := allowL(t, l, "f", 0, lim("f", 1000, 0)); d2.Remaining != d.Remaining {
		t.Errorf("rate 0 after the conversion: %d left, was %d", d2.Remaining, d.Remaining)
	}
}

// Rule 3's full case on the server's clock: a bucket full under its old
// limit is full under the new one, exactly as if its record had been
// dropped (a full record is dropped only on the key's next write, and the
// key expires only at PX, rounded up to the millisecond, so the script can
// find a full record), while a bucket not full, by as little as one unit,
// keeps its balance, clamped to the new capacity. Records stored an hour
// behind the server's clock are full at any reading; records an hour ahead
// refill nothing: every number is exact.
func TestPolicyCarryOverFull(t *testing.T) {
	ctx := context.Background()
	l, c, _ := newLimiter(t, 1, 1)
	x, y := lim("x", 10, 1), lim("y", 10, 0.001)
	perX, perY := func() (int64, int64) {
		_, px, _ := redisbucket.Record(x, 0, 0)
		_, py, _ := redisbucket.Record(y, 0, 0)
		return px, py
	}()
	now := serverTime(t, c)
	past, ahead := now-3600e6, now+3600e6
	store := func(key string, recs ...string) {
		t.Helper()
		if err := c.Set(ctx, redisbucket.RedisKey(l, key), redisbucket.Join(recs...), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rec := func(lm admit.Limit, d, t int64) string { r, _, _ := redisbucket.Record(lm, d, t); return r }
	for _, tc := range []struct {
		name   string
		to     admit.Limit // the carry's new limit for x
		others bool        // y's record beside x's, not full
		debt   int64       // x's debt in units
		at     int64       // x's stored time
		left   int64       // x's whole tokens after the carry
		full   bool
	}{
		// Full by refill: full at the new capacity, larger or smaller,
		// under any rate.
		{"full to larger", lim("x", 20, 0.001), false, 6 * perX, past, 20, true},
		{"full beside y to larger", lim("x", 20, 0.001), true, 6 * perX, past, 20, true},
		{"full beside y to smaller", lim("x", 5, 1), true, 6 * perX, past, 5, true},
		{"full beside y to faster", lim("x", 10, 1000), true, 6 * perX, past, 10, true},
		// Not full: the balance, clamped.
		{"one unit short to larger", lim("x", 20, 0.001), true, 1, ahead, 9, false},
		{"4 left to larger", lim("x", 20, 0.001), true, 6 * perX, ahead, 4, false},
		{"4 left to smaller", lim("x", 3, 0.001), true, 6 * perX, ahead, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			recs := []string{rec(x, tc.debt, tc.at)}
			if tc.others {
				recs = append(recs, rec(y, 4*perY, ahead))
			}
			store(key, recs...)
			d := allowL(t, l, key, 0, tc.to)
			if d.Remaining != tc.left || d.Limit != tc.to.Capacity || (d.ResetAfter == 0) != tc.full {
				t.Errorf("x carried to %v: %+v; want %d left, full %v", tc.to, d, tc.left, tc.full)
			}
			// Stored: x's record only if not full, y's as it was.
			got, ok := redisbucket.Decode(c.Get(ctx, redisbucket.RedisKey(l, key)).Val())
			want := map[string]bool{"x": !tc.full, "y": tc.others}
			for _, r := range got {
				if !want[r.Name] {
					t.Errorf("stored record %+v, want none for %q", r, r.Name)
				}
				delete(want, r.Name)
			}
			for name, held := range want {
				if held || !ok {
					t.Errorf("no stored record of %q (parsed: %v)", name, ok)
				}
			}
			// What the carry left is what the next call can take.
			if tc.left > 0 {
				if d := allowL(t, l, key, tc.left, tc.to); !d.Allowed {
					t.Errorf("taking the %d left: %+v", tc.left, d)
				}
			}
			if d := allowL(t, l, key, 1, tc.to); d.Allowed && tc.to.Rate < 1 {
				t.Errorf("one more than the %d left: %+v", tc.left, d)
			}
			if tc.others {
				if d := allowL(t, l, key, 0, y); d.Remaining != 6 {
					t.Errorf("y after x's carry: %+v; want its 6 left", d)
				}
			}
		})
	}
}

// The limiter's own limits (New, NewLimits) are strict: a key that holds
// one of their Names with other parameters is refused with
// ErrInvalidConfig and nothing written, as before several limits; the same
// key under AllowLimits carries over. Names outside a call are left as
// they are.
func TestPolicyStrictOwnLimits(t *testing.T) {
	ctx := context.Background()
	c := client(t, srv)
	a, b := lim("a", 5, 0.001), lim("b", 3, 0.001)
	f, err := redisbucket.NewLimits(c, []admit.Limit{a, b}, redisbucket.WithPrefix(uniquePrefix("t:strict:")), redisbucket.WithTimeout(testTimeout), redisbucket.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	if d, err := f.AllowN(ctx, "k", 2); err != nil || !d.Allowed || d.Policy != "b" || d.Remaining != 1 || d.Limit != 3 {
		t.Fatalf("AllowN(2) under a and b: %+v, %v; want b deciding with 1 left", d, err)
	}
	// Another Name on the key: a and b stay.
	if d := allowL(t, f, "k", 4, lim("c", 4, 0.001)); !d.Allowed || d.Policy != "c" || d.Remaining != 0 {
		t.Fatalf("c alone: %+v", d)
	}
	if d, err := f.AllowN(ctx, "k", 1); err != nil || !d.Allowed || d.Remaining != 0 || d.Policy != "b" {
		t.Fatalf("AllowN(1) after c: %+v, %v; want b's last token", d, err)
	}
	// AllowLimits brings a at another capacity: carried over (2 left).
	if d := allowL(t, f, "k", 0, lim("a", 50, 0.001)); d.Remaining != 2 || d.Limit != 50 {
		t.Fatalf("a at capacity 50: %+v; want 2 left", d)
	}
	before := c.Get(ctx, redisbucket.RedisKey(f, "k")).Val()
	d, err := f.AllowN(ctx, "k", 0)
	if !errors.Is(err, admit.ErrInvalidConfig) || errors.Is(err, admit.ErrUnavailable) || d.Allowed || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("AllowN on a key holding a at other parameters: %+v, %v; want a denial wrapping ErrInvalidConfig naming a", d, err)
	}
	if after := c.Get(ctx, redisbucket.RedisKey(f, "k")).Val(); after != before {
		t.Errorf("the refused call wrote: %q, was %q", after, before)
	}
	// A value this package did not write is refused too, and left as it
	// is: text, a record cut short, numbers that are not integers of the
	// script's ranges, a length prefix that is not digits; on the fast
	// path (the call's own head first) and on the parsing one.
	good, _, _ := redisbucket.Record(a, 1, 1)
	head := good[:len(good)-16]
	aRec := func(capUnits, d, t float64) string {
		var b []byte
		b = append(b, good[:len(good)-48]...)
		for _, x := range []float64{capUnits, 1, 1, 1, d, t} {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
		return string(b)
	}
	for _, junk := range []string{
		"hello",
		good[:len(good)-1],
		head + strings.Repeat("\xff", 16), // NaN debt and time
		redisbucket.Join(good, good[2:]),  // a second record whose length prefix is not digits
		aRec(5, 6, 1),                     // debt above the capacity
		aRec(5, 1.5, 1),                   // not an integer
		aRec(5, -1, 1),                    // negative
		aRec(5, 1, math.Inf(1)),
		"9:x" + good,               // the length runs past the value
		good + good[len(good)-16:], // a state more than the heads
	} {
		c.Set(ctx, redisbucket.RedisKey(f, "junk"), junk, 0)
		for _, ls := range [][]admit.Limit{{a}, {lim("other", 1, 1)}} {
			if d, err := f.AllowLimits(ctx, "junk", 1, ls...); !errors.Is(err, admit.ErrInvalidConfig) || d.Allowed {
				t.Errorf("a key holding %q, limits %v: %+v, %v", junk, ls, d, err)
			}
			if v := c.Get(ctx, redisbucket.RedisKey(f, "junk")).Val(); v != junk {
				t.Errorf("the refused call on %q wrote %q", junk, v)
			}
		}
	}
}

// A key's records: one per Name not full, PX at the moment the last one is
// full, records that are full dropped on the next write, and the key gone
// once every limit is full.
func TestPolicyKeyExpiry(t *testing.T) {
	ctx := context.Background()
	c := client(t, srv)
	burst, slowL := lim("burst", 10, 1000), lim("slow", 5, 1) // 1 per ms; 1 per s
	l, err := redisbucket.NewLimits(c, []admit.Limit{burst, slowL}, redisbucket.WithPrefix("t:policyexp:"), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.AllowN(ctx, "k", 3)
	if err != nil || !d.Allowed || d.Policy != "slow" || d.Remaining != 2 {
		t.Fatalf("AllowN(3): %+v, %v", d, err)
	}
	rk := redisbucket.RedisKey(l, "k")
	// PX is slow's refill (3 s), not burst's (3 ms).
	pttl := c.PTTL(ctx, rk).Val()
	if ceil := (d.ResetAfter + time.Millisecond - 1).Truncate(time.Millisecond); pttl > ceil || pttl <= 3*time.Millisecond {
		t.Errorf("PTTL %v; want above burst's 3 ms and at most ResetAfter %v rounded up", pttl, d.ResetAfter)
	}
	if recs, ok := redisbucket.Decode(c.Get(ctx, rk).Val()); !ok || len(recs) != 2 {
		t.Errorf("%d records (parsed: %v), want 2", len(recs), ok)
	}
	time.Sleep(10 * time.Millisecond) // burst full again
	if d := allowL(t, l, "k", 1, slowL); !d.Allowed {
		t.Fatalf("slow alone: %+v", d)
	}
	if recs, ok := redisbucket.Decode(c.Get(ctx, rk).Val()); !ok || len(recs) != 1 || recs[0].Name != "slow" {
		t.Errorf("stored %+v; want only slow's record, burst's full one dropped", recs)
	}
	gone := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c.Exists(ctx, rk).Val() == 0 {
			gone = true
			break
		}
	}
	if !gone {
		t.Fatal("the key outlived its last limit's refill")
	}
	if d, err := l.AllowN(ctx, "k", 0); err != nil || d.Remaining != 5 || d.ResetAfter != 0 || d.Policy != "slow" {
		t.Errorf("peek after expiry: %+v, %v; want every limit full", d, err)
	}
}

// Bad configurations of NewLimits and limits that the script cannot
// represent, both wrapping ErrInvalidConfig; n above the smallest capacity
// is unsatisfiable without a round trip.
func TestNewLimitsRejects(t *testing.T) {
	ctx := context.Background()
	c := client(t, srv)
	for name, limits := range map[string][]admit.Limit{
		"none":            nil,
		"duplicate":       {lim("a", 1, 1), lim("a", 2, 1)},
		"capacity 0":      {lim("a", 0, 1)},
		"unrepresented":   {lim("a", 1<<53, 1)},
		"inexact at 2^52": {lim("a", 1<<52, 0.7)},
	} {
		if l, err := redisbucket.NewLimits(c, limits); !errors.Is(err, admit.ErrInvalidConfig) || l != nil {
			t.Errorf("%s: NewLimits = %v, %v; want ErrInvalidConfig", name, l, err)
		}
	}
	l, _, _ := newLimiter(t, 1, 1)
	if _, err := l.AllowLimits(ctx, "k", 1, lim("a", 1<<53, 1)); !errors.Is(err, admit.ErrInvalidConfig) {
		t.Errorf("AllowLimits with an unrepresentable limit: %v", err)
	}
	m, err := redisbucket.NewLimits(c, []admit.Limit{lim("big", 10, 1), lim("small", 2, 1)}, redisbucket.WithPrefix("t:rej:"))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := m.AllowN(ctx, "k", 3); !errors.Is(err, admit.ErrUnsatisfiable) || d.Allowed || d.Policy != "small" || d.Limit != 2 {
		t.Errorf("AllowN(3) over small's capacity 2: %+v, %v", d, err)
	}
}

// When Redis cannot decide, a WithFallback limiter that is a
// PolicyLimiter is handed the call's limits; the fail-open and fail-closed
// Decisions name the smallest limit and describe no bucket.
func TestPolicyFailure(t *testing.T) {
	ctx := context.Background()
	s, err := startServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, s)
	s.Stop()
	fb, err := keyed.New(100, 1)
	if err != nil {
		t.Fatal(err)
	}
	limits := []admit.Limit{lim("burst", 3, 1), lim("daily", 1000, 0.01)}
	l, err := redisbucket.New(c, 100, 1, redisbucket.WithTimeout(200*time.Millisecond), redisbucket.WithFallback(fb))
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.AllowLimits(ctx, "k", 2, limits...)
	if !errors.Is(err, admit.ErrUnavailable) || !d.Allowed || d.Policy != "burst" || d.Remaining != 1 || d.Limit != 3 {
		t.Errorf("fallback under the call's limits: %+v, %v; want burst deciding with 1 of 3 left", d, err)
	}
	d, err = l.AllowN(ctx, "k", 2)
	if !errors.Is(err, admit.ErrUnavailable) || !d.Allowed || d.Policy != "" || d.Limit != 100 || d.Remaining != 98 {
		t.Errorf("fallback's AllowN for the limiter's own limit: %+v, %v", d, err)
	}
	for _, open := range []bool{false, true} {
		opts := []redisbucket.Option{redisbucket.WithTimeout(200 * time.Millisecond)}
		if open {
			opts = append(opts, redisbucket.WithFailOpen())
		}
		l, err := redisbucket.New(c, 100, 1, opts...)
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.AllowLimits(ctx, "k", 1, limits...)
		want := admit.Decision{Allowed: open, Limit: 3, Policy: "burst"}
		if !errors.Is(err, admit.ErrUnavailable) || d != want {
			t.Errorf("open=%v: %+v, %v; want %+v", open, d, err, want)
		}
	}
}

// WithBatch under several limits: a round trip takes the batch from every
// limit, the surplus is spent locally, and the limiter's Decisions name the
// deciding limit.
func TestPolicyBatch(t *testing.T) {
	ctx := context.Background()
	c := client(t, srv)
	l, err := redisbucket.NewLimits(c, []admit.Limit{lim("a", 10, 0.001), lim("b", 6, 0.001)},
		redisbucket.WithPrefix(uniquePrefix("t:pbatch:")), redisbucket.WithTimeout(testTimeout), redisbucket.WithBatch(4, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 6; i++ {
		d, err := l.AllowN(ctx, "k", 1)
		if err != nil || !d.Allowed || d.Policy != "b" || d.Remaining != 6-i {
			t.Fatalf("take %d: %+v, %v; want b deciding with %d left", i, d, err, 6-i)
		}
	}
	if d, err := l.AllowN(ctx, "k", 1); err != nil || d.Allowed || d.Policy != "b" {
		t.Errorf("past b: %+v, %v", d, err)
	}
	// The server holds a's record at 6 taken: batching took from both.
	if d := allowL(t, l, "k", 0, lim("a", 10, 0.001)); d.Remaining != 4 {
		t.Errorf("a after 6 batched admissions: %+v; want 4 left", d)
	}
}

// TestCachedSetAllocs: AllowLimits' set cache exists so that a call
// with limits seen before allocates nothing for them; a named limit must
// cost no more allocations than an unnamed one.
func TestCachedSetAllocs(t *testing.T) {
	l, _, _ := newLimiter(t, 10, 1)
	ctx := context.Background()
	named := []admit.Limit{lim("burst", 1000000, 1e6), lim("daily", 1000000, 1e6)}
	unnamed := []admit.Limit{lim("", 1000000, 1e6)}
	measure := func(ls []admit.Limit) float64 {
		l.AllowLimits(ctx, "k", 1, ls...)
		return testing.AllocsPerRun(200, func() {
			if _, err := l.AllowLimits(ctx, "k", 1, ls...); err != nil {
				t.Fatal(err)
			}
		})
	}
	if a, b := measure(named), measure(unnamed); a > b {
		t.Errorf("AllowLimits with two cached named limits: %.0f allocations a call; with one unnamed: %.0f", a, b)
	}
}
