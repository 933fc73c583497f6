package rate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	xrate "golang.org/x/time/rate"
)

// Cancelling a reservation made before the limit was raised, on explicit
// times. x/time/rate gives back the reservation's tokens less those
// reserved after it counted at its old rate, which after the raise counts
// too few (a later reservation at the new rate acts before it), and on top
// of a balance that the faster refill may already have brought up to the
// burst: either lets more than the burst act at once. Each case drains a
// bucket at t0, reserves R behind it, raises the limit at t0, and then:
func TestCancelAfterLimitChange(t *testing.T) {
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type setup struct {
		lim *Limiter
		x   *xrate.Limiter
		r   *Reservation
		xr  *xrate.Reservation
	}
	// takeThenCancel takes n at `at` from both limiters, then cancels R in
	// both.
	takeThenCancel := func(t *testing.T, s setup, at time.Time, n int) {
		require.True(t, s.lim.AllowN(at, n))
		require.True(t, s.x.AllowN(at, n))
		s.r.CancelAt(at)
		s.xr.CancelAt(at)
	}
	for _, tc := range []struct {
		name          string
		limit, raised Limit
		burst         int
		run           func(t *testing.T, s setup)
	}{
		{
			// 1/s, burst 3, R of 3 (acts at 3 s), raised to 10/s: W of 3
			// acts at +600 ms, behind R's debt. Cancelling R must keep
			// W's place: W2 acts a burst's refill (300 ms) after W, not
			// with it (x/time/rate: 360 ms, 240 ms before W).
			"later reservation keeps its place", 1, 10, 3, func(t *testing.T, s setup) {
				lim, x := s.lim, s.x
				w, xw := lim.ReserveN(t0, 3), x.ReserveN(t0, 3)
				require.Equal(t, 600*time.Millisecond, w.DelayFrom(t0))
				require.Equal(t, 600*time.Millisecond, xw.DelayFrom(t0))
				s.r.CancelAt(t0)
				s.xr.CancelAt(t0)
				w2, xw2 := lim.ReserveN(t0, 3), x.ReserveN(t0, 3)
				require.Equal(t, 900*time.Millisecond, w2.DelayFrom(t0))
				require.Equal(t, 360*time.Millisecond, xw2.DelayFrom(t0), "x/time/rate's behaviour changed")
			},
		},
		{
			// 10/s, burst 10, R of 10, raised to 1000/s: full again by
			// +20 ms; 10 taken at +50 ms; R cancelled: a limiter without
			// R would hold nothing, so nothing comes back.
			"refilled to the burst", 10, 1000, 10, func(t *testing.T, s setup) {
				lim, x := s.lim, s.x
				takeThenCancel(t, s, ms(50), 10)
				require.False(t, lim.AllowN(ms(50), 1), "20 tokens at one instant, burst 10")
				require.True(t, x.AllowN(ms(50), 10), "x/time/rate's behaviour changed")
			},
		},
		{
			// 10/s, burst 10, R of 10, raised to 1000/s: 9 tokens by
			// +19 ms (the burst never reached), 5 taken, R cancelled. A
			// limiter without R was full from +10 ms, its cap discarding
			// 9 tokens: it holds 5 at +19 ms. Giving back R's tokens less
			// those taken since would make it 9; with the peak's room
			// (10 − 9) less the 5 taken since, nothing comes back: 4.
			"refill a limiter without it would have lost", 10, 1000, 10, func(t *testing.T, s setup) {
				lim, x := s.lim, s.x
				takeThenCancel(t, s, ms(19), 5)
				require.Equal(t, 4.0, lim.TokensAt(ms(19)))
				require.InDelta(t, 10.0, x.TokensAt(ms(19)), 1e-9, "x/time/rate's behaviour changed")
			},
		},
		{
			// 1/s, burst 10, R of 10 (acts at 10 s), raised to 1000/s: W
			// of 10, made after the raise, acts at +20 ms behind R's
			// debt. At +19 ms the debt is 1, but W still waits with all
			// of its 10 tokens: cancelling R gives back nothing, or the
			// burst would be spent twice over around W's time (18 tokens
			// in [19 ms, 20 ms], with the debt taken as W's share).
			"later reservation partly refilled", 1, 1000, 10, func(t *testing.T, s setup) {
				w := s.lim.ReserveN(t0, 10)
				require.Equal(t, 20*time.Millisecond, w.DelayFrom(t0))
				s.r.CancelAt(ms(19))
				require.False(t, s.lim.AllowN(ms(19), 1))
			},
		},
		{
			// A later reservation of 1 that has acted by the cancel: R's
			// tokens come back less that one, within the room its balance
			// left since the raise (a peak of 1, and the 1 reserved): 8,
			// where a limiter without R would hold 10.
			"a later reservation has acted", 10, 1000, 10, func(t *testing.T, s setup) {
				lim := s.lim
				require.Zero(t, lim.ReserveN(ms(11), 1).DelayFrom(ms(11)))
				s.r.CancelAt(ms(12))
				// 1 refilled by +12 ms, and 8 back.
				require.Equal(t, 9.0, lim.TokensAt(ms(12)))
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim, x := NewLimiter(tc.limit, tc.burst), xrate.NewLimiter(xrate.Limit(tc.limit), tc.burst)
			require.True(t, lim.AllowN(t0, tc.burst))
			require.True(t, x.AllowN(t0, tc.burst))
			s := setup{lim: lim, x: x, r: lim.ReserveN(t0, tc.burst), xr: x.ReserveN(t0, tc.burst)}
			lim.SetLimitAt(t0, tc.raised)
			x.SetLimitAt(t0, xrate.Limit(tc.raised))
			tc.run(t, s)
		})
	}
}

// TestCancelWindowsModel interleaves every operation that changes the
// state (Allow, Reserve, Cancel, SetLimit, SetBurst) on explicit times
// whose readings may be up to 5 ms stale (the limiter's time never goes
// back), records each admission at the time its holder acts (a reservation
// cancelled before then never acts), and checks every window [a, b]: at
// most the highest burst in force in it plus the integral of the limit in
// force over it, plus one token. Reservations still waiting when the limit or burst
// changes are left out, as SetLimitAt allows them to break the new one.
// The three modes add the changes one at a time. (Before Cancel had its
// rule for changes, seed 394 of the last mode broke the bound by 3.8
// tokens.)
func TestCancelWindowsModel(t *testing.T) {
	run := func(seed uint64, limits, burstsToo bool) (float64, string) {
		return cancelWindowsRun(seed, limits, burstsToo, narrowWindows)
	}
	for _, mode := range []struct {
		name            string
		limits, bursts2 bool
	}{{"fixed", false, false}, {"SetBurst", false, true}, {"SetLimit and SetBurst", true, true}} {
		for seed := range uint64(5000) {
			if e, where := run(seed, mode.limits, mode.bursts2); e > 0 {
				t.Fatalf("%s, seed %d: %.3f tokens over the bound: %s", mode.name, seed, e, where)
			}
		}
	}
}

// TestCancelWindowsWide is TestCancelWindowsModel over a wider alphabet:
// limits of zero and non-decimal ones (1/3, Every(3 s): num/den with other
// denominators, so a change rounds the balance and the peaks), burst 0, n
// from 0 to beyond the highest burst; in the second half, longer
// sequences with three times as many changes of the limit or burst, so
// that reservations outlive the four changes Cancel keeps (reservations
// waiting at a change are left out of the check, so the first half, with
// fewer changes, is the one that catches a Cancel giving back too much:
// without the count of tokens reserved after, seed 88). ADMIT_RATE_SEEDS
// sets the sequences of each half (default 1000).
func TestCancelWindowsWide(t *testing.T) {
	seeds := uint64(1000)
	if v := os.Getenv("ADMIT_RATE_SEEDS"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
		seeds = n
	}
	wide := windowsAlphabet{
		rates:  []Limit{0, 0.5, 1, Limit(1.0 / 3), Every(3 * time.Second), 3.3, 10, 100, 1000},
		bursts: []int{0, 1, 2, 3, 5, 10},
		steps:  []int64{0, 0, 1, 1e3, 1e6, 1e7, 1e8, 5e8, 1e9, 3e9},
		minN:   0,
		maxN:   12,
		ops:    40,
	}
	many := wide
	many.ops, many.extra = 60, 4
	for _, a := range []windowsAlphabet{wide, many} {
		for seed := range seeds {
			if e, where := cancelWindowsRun(seed, true, true, a); e > 0 {
				t.Fatalf("%d operations, %d in %d changes, seed %d: %.3f tokens over the bound: %s",
					a.ops, 2+a.extra, 10+a.extra, seed, e, where)
			}
		}
	}
}

// windowsAlphabet is what cancelWindowsRun draws from: limits, bursts, time
// steps, the n a reservation asks for (minN to maxN), the operations in a
// sequence, and extra: of every 10+extra operations, 2+extra change the
// limit or burst.
type windowsAlphabet struct {
	rates      []Limit
	bursts     []int
	steps      []int64
	minN, maxN int
	ops, extra int
}

// narrowWindows is TestCancelWindowsModel's alphabet.
var narrowWindows = windowsAlphabet{
	rates:  []Limit{0.5, 1, 10, 100, 1000},
	bursts: []int{1, 2, 3, 5, 10},
	steps:  []int64{0, 0, 1, 1e3, 1e6, 1e7, 1e8, 1e9},
	minN:   1,
	maxN:   6,
	ops:    40,
}

// cancelWindowsRun is one sequence of TestCancelWindowsModel: it returns
// the most tokens by which a window exceeded its bound (0 if none) and
// the sequence that did.
func cancelWindowsRun(seed uint64, limits, burstsToo bool, a windowsAlphabet) (float64, string) {
	type admission struct {
		at   int64
		n    int
		live bool
	}
	type change struct {
		at    int64
		rate  float64
		burst int
	}
	rates, bursts, steps := a.rates, a.bursts, a.steps
	rng := rand.New(rand.NewPCG(seed, 99))
	r0, b0 := rates[rng.IntN(len(rates))], bursts[rng.IntN(len(bursts))]
	lim := NewLimiter(r0, b0)
	clock := int64(1e9)
	changes := []change{{0, float64(r0), b0}}
	var adms []admission
	type held struct {
		r   *Reservation
		i   int
		act int64
	}
	var rs []held
	var log []string
	for range a.ops {
		clock += steps[rng.IntN(len(steps))]
		reading := clock - rng.Int64N(5e6+1)
		lim.mu.Lock()
		ts := lim.now(reading)
		var op string
		switch k := rng.IntN(10 + a.extra); {
		case k <= 2:
			ok := lim.allow1(ts)
			if ok {
				adms = append(adms, admission{ts, 1, true})
			}
			op = fmt.Sprintf("Allow@%d=%v", ts, ok)
		case k <= 5:
			n := a.minN + rng.IntN(a.maxN-a.minN+1)
			r, wait := lim.reservation(ts, n, InfDuration)
			if r.ok && wait != int64(InfDuration) {
				adms = append(adms, admission{ts + wait, n, true})
				rs = append(rs, held{&r, len(adms) - 1, ts + wait})
			}
			op = fmt.Sprintf("Reserve(%d)@%d ok=%v act=%d", n, ts, r.ok, ts+wait)
		case k <= 7:
			if len(rs) == 0 {
				break
			}
			h := rs[rng.IntN(len(rs))]
			lim.mu.Unlock()
			h.r.cancel(time.Time{}, reading, true)
			lim.mu.Lock()
			if ts <= h.act {
				adms[h.i].live = false
			}
			op = fmt.Sprintf("Cancel(act=%d)@%d", h.act, ts)
		case (k == 8 || k >= 10 && k%2 == 0) && limits:
			l := rates[rng.IntN(len(rates))]
			lim.setLimit(ts, l)
			changes = append(changes, change{ts, float64(l), changes[len(changes)-1].burst})
			for _, h := range rs {
				if h.act > ts {
					adms[h.i].live = false
				}
			}
			op = fmt.Sprintf("SetLimit(%v)@%d", l, ts)
		case (k == 9 || k >= 10 && k%2 == 1) && burstsToo:
			b := bursts[rng.IntN(len(bursts))]
			lim.setBurst(ts, b)
			changes = append(changes, change{ts, changes[len(changes)-1].rate, b})
			for _, h := range rs {
				if h.act > ts {
					adms[h.i].live = false
				}
			}
			op = fmt.Sprintf("SetBurst(%d)@%d", b, ts)
		}
		lim.mu.Unlock()
		log = append(log, op)
	}
	// refill is the integral of the limit in force over [a, b], in tokens.
	refill := func(a, b int64) float64 {
		sum := 0.0
		for i, c := range changes {
			end := int64(1 << 62)
			if i+1 < len(changes) {
				end = changes[i+1].at
			}
			if lo, hi := max(a, c.at), min(b, end); hi > lo {
				sum += c.rate * float64(hi-lo) / 1e9
			}
		}
		return sum
	}
	// burstIn is the highest burst in force in [a, b], one that
	// ends at a included (a change at an admission's instant may
	// follow it).
	burstIn := func(a, b int64) int {
		m := 0
		for i, c := range changes {
			end := int64(1 << 62)
			if i+1 < len(changes) {
				end = changes[i+1].at
			}
			if c.at <= b && end >= a {
				m = max(m, c.burst)
			}
		}
		return m
	}
	var live []admission
	for _, a := range adms {
		if a.live {
			live = append(live, a)
		}
	}
	slices.SortFunc(live, func(x, y admission) int { return int(x.at - y.at) })
	worst, where := 0.0, ""
	for i := range live {
		sum := 0
		for j := i; j < len(live); j++ {
			sum += live[j].n
			if e := float64(sum) - float64(burstIn(live[i].at, live[j].at)) - refill(live[i].at, live[j].at) - 1; e > worst {
				worst = e
				where = fmt.Sprintf("%d tokens in [%d, %d]; ops: %v", sum, live[i].at, live[j].at, log)
			}
		}
	}
	return worst, where
}

// TestCancelAfterBurstLowered: 1/s, burst 10, drained, R of 10 (acts at
// 10 s); the burst lowered to 2; W of 2 acts at 12 s. Cancelling R must
// leave W's tokens their room in the burst: X of 2 acts at 14 s, not with
// W (4 tokens at one instant on a burst of 2).
func TestCancelAfterBurstLowered(t *testing.T) {
	t0 := time.Now()
	lim := NewLimiter(1, 10)
	require.True(t, lim.AllowN(t0, 10))
	r := lim.ReserveN(t0, 10)
	lim.SetBurstAt(t0, 2)
	w := lim.ReserveN(t0, 2)
	require.Equal(t, 12*time.Second, w.DelayFrom(t0))
	r.CancelAt(t0)
	x := lim.ReserveN(t0, 2)
	require.True(t, x.OK())
	require.Equal(t, 14*time.Second, x.DelayFrom(t0))
}

// seq counts every token reserved, in a uint64: it wraps after 2^64 tokens,
// which a limiter with a huge rate and burst passes in seconds (1e18/s
// refills 2^62 tokens in under 5 s). Cancel must still see a change of the
// limit made after the reservation when seq wrapped between the two, or it
// takes the fixed-rate path and counts later tokens at the new rate: here
// the case of TestCancelAfterLimitChange, "refilled to the burst", with seq
// wrapping at the raise, which let 20 act at one instant on a burst of 10.
func TestCancelSeqWrap(t *testing.T) {
	t0 := time.Now()
	lim := NewLimiter(1e18, math.MaxInt)
	const tail = 1 + 1 + 10 + 10 // SetBurstAt, SetLimitAt, the drain, R
	pump := []int{1 << 62, 1 << 62, 1 << 62, 1<<62 - tail - 1}
	at := t0
	for i, k := range pump {
		if !lim.AllowN(at, k) {
			t.Fatalf("pump %d of %d refused", i, k)
		}
		at = at.Add(10 * time.Second) // refills 1e19 tokens: full
	}
	lim.SetBurstAt(at, 10)
	lim.SetLimitAt(at, 10)
	if !lim.AllowN(at, 10) {
		t.Fatal("drain refused")
	}
	r := lim.ReserveN(at, 10)
	if r.DelayFrom(at) != time.Second {
		t.Fatalf("R delay %v", r.DelayFrom(at))
	}
	if r.seq != math.MaxUint64 {
		t.Fatalf("setup: R's seq %d, want 2^64-1 so that the raise wraps it", r.seq)
	}
	lim.SetLimitAt(at, 1000)
	ms50 := at.Add(50 * time.Millisecond)
	if !lim.AllowN(ms50, 10) {
		t.Fatal("refilled burst refused")
	}
	r.CancelAt(ms50)
	if lim.AllowN(ms50, 1) {
		t.Errorf("after the cancel, %v tokens more at the same instant: more than the burst of 10 at once", 1+lim.TokensAt(ms50))
	}
}

// TestCancelCountsAllow: Allow is AllowN(time.Now(), 1), so a Cancel after
// a change of the limit gives back the same whichever of them took the
// tokens after the reservation. At 1/s, burst 10, drained, R of 10 (acts
// at 10 s); the limit raised to 1000/s; one token taken every millisecond
// from 11 ms to 100 ms; R cancelled at 100 ms. Both take 90 tokens; R
// gives back its tokens less every token taken after it (docs/rate.md):
// nothing. Allow's fast path did not count its tokens, and R gave back 9.
func TestCancelCountsAllow(t *testing.T) {
	t0 := time.Now()
	for _, fast := range []bool{false, true} {
		lim := NewLimiter(1, 10)
		require.True(t, lim.AllowN(t0, 10))
		r := lim.ReserveN(t0, 10)
		require.True(t, r.OK())
		lim.SetLimitAt(t0, 1000)
		taken := 0
		for k := 11; k <= 100; k++ {
			at := t0.Add(time.Duration(k) * time.Millisecond)
			var ok bool
			if fast {
				d, tt := since(at)
				lim.mu.Lock()
				ok = lim.allow1(lim.at(tt, d)) // Allow at that reading
				lim.mu.Unlock()
			} else {
				ok = lim.AllowN(at, 1)
			}
			if ok {
				taken++
			}
		}
		require.Equal(t, 90, taken, "fast path %v", fast)
		end := t0.Add(100 * time.Millisecond)
		r.CancelAt(end)
		require.Equal(t, 0.0, lim.TokensAt(end), "fast path %v: given back after the Allows", fast)
	}
}
