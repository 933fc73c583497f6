package rate

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	xrate "golang.org/x/time/rate"
)

// TestExplicitWalk is a seeded model walk over every state-changing call
// on explicit times: AllowN, ReserveN then DelayFrom at other times and
// CancelAt (the same reservation again included), WaitN through wait with
// a fake timer (fired at once, past a context deadline, or never, its
// context cancelled while it waits), SetLimitAt, SetBurstAt and TokensAt,
// with n of 0, negative, beyond the burst and huge, limits 0, Inf, the
// smallest float, tiny, non-decimal (Stern–Brocot and Every) and huge ones,
// and bursts 0 to 3. Times step forward, repeat, jump by days and years,
// and (in half the walks) go back.
//
// Each call is compared with golang.org/x/time/rate v0.16.0 until the two
// part for a reason docs/rate.md gives: a negative n, a cancel that is
// repeated, of a reservation made at Inf, after a change of the limit or
// burst, or that x/time/rate lets restore more than it took, a wait whose
// context ends (this package's implicit Cancel never moves the limiter's
// time back; x/time/rate's moves it to time.Now), or a decision at a
// balance within float64 rounding of the boundary. Any other difference
// fails. Balances are compared after every call, within float64 rounding
// (and one nanosecond of refill, as delays are rounded to nanoseconds).
//
// In the walks whose times never go back, every admission is recorded at
// the time its holder acts (a reservation cancelled by then, or a wait
// whose context ended, never acts) and every window [a, b] is checked
// against the documented bound: the highest burst in force in it plus the
// integral of the limit in force over [a−1ns, b+1ns], windows that touch a
// period at Inf left out, as are reservations still waiting when the limit
// or burst changes (SetLimitAt's doc lets them break the new values).
func TestExplicitWalk(t *testing.T) {
	seqs := 1500
	if testing.Short() {
		seqs = 300
	}
	var st walkStats
	for seed := range uint64(seqs) {
		walkOnce(t, seed, seed%2 == 0, &st)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d walks, %d calls (%d compared with x/time/rate), %d admissions checked in %d windows; parted from x/time/rate: %v",
		seqs, st.calls, st.compared, st.admissions, st.windows, st.parted)
	if st.windows < 10*seqs || st.compared < 40*seqs {
		t.Fatalf("walk too thin: %+v", st)
	}
}

type walkStats struct {
	calls, compared, admissions, windows int
	parted                               map[string]int
}

var (
	walkLimits = []Limit{0, Inf, 0.5, 1, 3, 10, 1e6, 1e9, 1e12, 1e300, 1e-10, 7.0 / 86400, Limit(1.0 / 3), Every(3 * time.Second),
		Every(7 * time.Millisecond), 123.456789, Limit(math.SmallestNonzeroFloat64), Limit(math.Pi)}
	walkNs    = []int{0, 1, 1, 1, 2, 2, 3, 3, 4, 7, -1, -3, 1 << 40}
	walkSteps = []time.Duration{0, 0, 0, 1, 2, 999, time.Microsecond, time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond,
		333333333, time.Second, 3 * time.Second, time.Minute, time.Hour, 24 * time.Hour, 365 * 24 * time.Hour}
	walkBack = []time.Duration{-1, -time.Millisecond, -100 * time.Millisecond, -time.Second, -time.Hour}
)

// walkTok is the float64 rounding allowed between the two packages'
// balances: relative to the balance, plus two nanoseconds of refill at the
// highest limit used so far.
func walkTok(x float64, maxLimit float64) float64 {
	return 1e-6 + 1e-9*math.Abs(x) + 2e-9*maxLimit
}

func walkOnce(t *testing.T, seed uint64, monotone bool, st *walkStats) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x3a1c))
	// Walk times lie at least a year after the real clock, so that the
	// implicit Cancel of a wait whose context ends is applied at the
	// limiter's latest time, whatever the real clock reads.
	base := time.Now().Add(2 * 365 * 24 * time.Hour)
	now := base
	l0, b0 := walkLimits[rng.IntN(len(walkLimits))], rng.IntN(4)
	mine, x := NewLimiter(l0, b0), xrate.NewLimiter(xrate.Limit(l0), b0)
	maxLimit := func(l Limit) float64 {
		if l == Inf || l > 1e15 {
			return 0 // fills or ignores the burst: tokens compare exactly
		}
		return float64(l)
	}
	topLimit := maxLimit(l0)

	type admission struct {
		at   time.Time
		n    int
		live bool
	}
	type change struct {
		at    time.Time
		limit Limit
		burst int
	}
	type held struct {
		r         *Reservation
		xr        *xrate.Reservation
		n         int
		adm       int // index in adms, or -1
		act       time.Time
		inf       bool
		changes   int // len(changes) when made
		cancelled bool
	}
	var (
		adms    []admission
		changes = []change{{base.Add(-time.Hour), l0, b0}}
		rs      []*held
		waits   []*held // WaitN's admissions, for changed
		log     []string
		parted  string
	)
	part := func(why string) {
		if parted == "" {
			parted = why
			if st.parted == nil {
				st.parted = map[string]int{}
			}
			st.parted[why]++
		}
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (monotone %v): %s\nops: %s", seed, monotone, fmt.Sprintf(format, args...), strings.Join(log, "; "))
	}
	cur := func() change { return changes[len(changes)-1] }
	admit := func(at time.Time, n int) int {
		if n <= 0 || cur().limit == Inf {
			return -1
		}
		adms = append(adms, admission{at, n, true})
		return len(adms) - 1
	}
	// A change drops the reservations still waiting from the bound.
	changed := func(at time.Time, l Limit, b int) {
		changes = append(changes, change{at, l, b})
		for _, h := range append(rs, waits...) {
			if h.adm >= 0 && h.act.After(at) {
				adms[h.adm].live = false
			}
		}
	}
	// delayClose: equal within float64 rounding of a delay of size scale.
	delayClose := func(a, b, scale time.Duration) bool {
		if a == b {
			return true
		}
		if a == InfDuration || b == InfDuration {
			// Past MaxInt64 in one, just below it in the other.
			return min(a, b) > InfDuration/2
		}
		return math.Abs(float64(a-b)) <= 2+1e-9*math.Abs(float64(max(a, scale)))
	}

	for range 40 + rng.IntN(80) {
		if !monotone && rng.IntN(5) == 0 {
			now = now.Add(walkBack[rng.IntN(len(walkBack))])
		} else {
			now = now.Add(walkSteps[rng.IntN(len(walkSteps))])
		}
		tm := now
		st.calls++
		// Both balances before the call, for deciding whether a difference
		// is float rounding at the boundary. (TokensAt changes nothing.)
		mb, xb := mine.TokensAt(tm), x.TokensAt(tm)
		var op string
		switch k := rng.IntN(20); {
		case k < 5: // AllowN
			n := walkNs[rng.IntN(len(walkNs))]
			before := mine.bookkeeping()
			ok := mine.AllowN(tm, n)
			op = fmt.Sprintf("AllowN(%v, %d)=%v", tm.Sub(base), n, ok)
			if ok {
				admit(tm, n)
			} else if after := mine.bookkeeping(); after != before {
				fail("%s: refused, it changed the limiter: %+v, before %+v", op, after, before)
			}
			if n < 0 && ok != (cur().limit == Inf) {
				fail("%s: a negative n is refused unless the limit is Inf", op)
			}
			if parted == "" {
				// A negative n is refused (docs/rate.md), where x/time/rate
				// adds -n tokens: it is not passed on.
				xok := ok
				if n >= 0 || cur().limit == Inf {
					xok = x.AllowN(tm, n)
				}
				switch {
				case ok == xok:
				case math.Abs(mb-float64(n)) <= walkTok(mb, topLimit):
					part("float at the boundary")
				default:
					fail("%s, x/time/rate %v (balances %v, %v)", op, xok, mb, xb)
				}
			}
		case k < 9: // ReserveN, DelayFrom at other times
			n := walkNs[rng.IntN(len(walkNs))]
			inf := cur().limit == Inf
			before := mine.bookkeeping()
			r := mine.ReserveN(tm, n)
			d := r.DelayFrom(tm)
			op = fmt.Sprintf("ReserveN(%v, %d)=%v,%v", tm.Sub(base), n, r.OK(), d)
			if after := mine.bookkeeping(); !r.OK() && after != before {
				fail("%s: refused, it changed the limiter: %+v, before %+v", op, after, before)
			}
			if n < 0 && r.OK() != inf {
				fail("%s: a negative n is refused unless the limit is Inf", op)
			}
			if r.OK() != (inf || n >= 0 && n <= cur().burst) {
				fail("%s: OK must be n within the burst", op)
			}
			if !r.OK() && d != InfDuration {
				fail("%s: not OK, delay %v", op, d)
			}
			h := &held{r: r, n: n, adm: -1, inf: inf, changes: len(changes), act: tm.Add(d)}
			if r.OK() && d != InfDuration && (d < InfDuration/4) {
				h.adm = admit(tm.Add(d), n)
			}
			if parted == "" && (n >= 0 || inf) {
				xr := x.ReserveN(tm, n)
				h.xr = xr
				xd := xr.DelayFrom(tm)
				switch {
				case r.OK() == xr.OK() && delayClose(d, xd, d):
					for _, dt := range []time.Duration{-time.Second, -1, 1, time.Millisecond, d, time.Hour} {
						if a, b := r.DelayFrom(tm.Add(dt)), xr.DelayFrom(tm.Add(dt)); !delayClose(a, b, d) {
							fail("%s: DelayFrom(+%v) %v, x/time/rate %v", op, dt, a, b)
						}
					}
				case n < 0:
					part("negative n")
				default:
					fail("%s, x/time/rate %v,%v (balances %v, %v)", op, xr.OK(), xd, mb, xb)
				}
			}
			rs = append(rs, h)
		case k < 12: // CancelAt, sometimes of one cancelled already
			if len(rs) == 0 {
				continue
			}
			h := rs[rng.IntN(len(rs))]
			again := h.cancelled
			h.cancelled = true
			h.r.CancelAt(tm)
			ma := mine.TokensAt(tm)
			op = fmt.Sprintf("CancelAt(%v) of %d acting at %v, again %v: %v -> %v", tm.Sub(base), h.n, h.act.Sub(base), again, mb, ma)
			if !again && h.adm >= 0 && !tm.After(h.act) {
				adms[h.adm].live = false
			}
			if again && ma != mb {
				fail("%s: a second cancel gave back", op)
			}
			if !h.r.OK() || h.n <= 0 || h.inf || again || tm.After(h.act) || cur().limit == Inf {
				if ma != mb {
					fail("%s: this cancel must give nothing back", op)
				}
			} else if ma-mb > float64(h.n)+walkTok(ma, topLimit) {
				fail("%s: gave back more than its %d tokens", op, h.n)
			}
			if parted == "" && h.xr != nil {
				h.xr.CancelAt(tm)
				xa := x.TokensAt(tm)
				switch tol := walkTok(xa, topLimit); {
				case math.Abs(ma-xa) <= tol:
				case again:
					part("cancel repeated")
				case h.inf:
					part("cancel of a reservation made at Inf")
				case len(changes) != h.changes:
					part("cancel after a change")
				case xa-xb > ma-mb && ma-mb >= float64(h.n)-tol || xa-xb > float64(h.n)+tol:
					part("x/time/rate restores more than the reservation took")
				default:
					fail("%s, x/time/rate %v -> %v", op, xb, xa)
				}
			}
		case k < 15: // WaitN through wait with a fake timer
			n := walkNs[rng.IntN(len(walkNs))]
			mode := rng.IntN(3) // 0: fires at once; 1: a deadline; 2: never fires, ctx cancelled while waiting
			ctx, cancel := context.WithCancel(context.Background())
			dl := time.Duration(0)
			if mode == 1 {
				dl = []time.Duration{0, 1, time.Millisecond, time.Second, time.Hour}[rng.IntN(5)]
				ctx, cancel = context.WithDeadline(context.Background(), tm.Add(dl))
			}
			var asked time.Duration = -1
			err := mine.wait(ctx, n, tm, func(d time.Duration) (<-chan time.Time, func() bool, func()) {
				asked = d
				if mode == 2 {
					return nil, func() bool { return true }, cancel
				}
				ch := make(chan time.Time, 1)
				ch <- tm.Add(d)
				return ch, func() bool { return true }, func() {}
			})
			cancel()
			op = fmt.Sprintf("WaitN(%v, %d) mode %d deadline +%v: asked %v, %v", tm.Sub(base), n, mode, dl, asked, err)
			inf := cur().limit == Inf
			switch {
			case n < 0 && !inf:
				if err == nil || err.Error() != fmt.Sprintf("rate: Wait(n=%d) is negative", n) {
					fail("%s: want the negative n error", op)
				}
			case n > cur().burst && !inf:
				if err == nil || err.Error() != fmt.Sprintf("rate: Wait(n=%d) exceeds limiter's burst %d", n, cur().burst) {
					fail("%s: want the burst error", op)
				}
			case err == nil:
				if asked > 0 && asked < InfDuration/4 || asked == -1 {
					act := tm.Add(max(asked, 0))
					waits = append(waits, &held{adm: admit(act, n), act: act})
				}
				if mode == 1 && asked > dl {
					fail("%s: waits past the deadline", op)
				}
			case mode == 2 && err == context.Canceled:
			case err.Error() == fmt.Sprintf("rate: Wait(n=%d) would exceed context deadline", n):
				if mine.TokensAt(tm) != mb {
					fail("%s: a refused wait took tokens", op)
				}
			default:
				fail("%s: unexpected error", op)
			}
			if parted == "" {
				// x/time/rate's wait is unexported: its WaitN at tm is
				// ReserveN(tm, n) when the delay is within the deadline.
				switch {
				case n < 0 && !inf: // refused, as ReserveN
				case n > cur().burst && !inf:
				case mode == 2 && asked > 0:
					part("wait cancelled: implicit Cancel never moves time back")
				case mode == 1:
					need, xd := float64(n)-xb, time.Duration(0)
					switch l := float64(cur().limit); {
					case inf || need <= 0:
					case l <= 0 || need/l*1e9 > float64(InfDuration):
						xd = InfDuration
					default:
						xd = time.Duration(need / l * 1e9)
					}
					if xd > 0 && math.Abs(float64(xd-dl)) <= 2+1e-9*float64(dl) || !inf && math.Abs(need) <= 1e-6+1e-9*math.Abs(xb) {
						part("float at the deadline")
						break
					}
					if (xd <= dl) != (err == nil) {
						fail("%s: x/time/rate's delay would be %v", op, xd)
					}
					if err == nil {
						x.ReserveN(tm, n)
					}
				default:
					x.ReserveN(tm, n)
				}
			}
		case k < 17: // SetLimitAt
			l := walkLimits[rng.IntN(len(walkLimits))]
			mine.SetLimitAt(tm, l)
			x.SetLimitAt(tm, xrate.Limit(l))
			topLimit = math.Max(topLimit, maxLimit(l))
			changed(tm, l, cur().burst)
			op = fmt.Sprintf("SetLimitAt(%v, %v)", tm.Sub(base), l)
		case k < 19: // SetBurstAt
			b := rng.IntN(4)
			mine.SetBurstAt(tm, b)
			x.SetBurstAt(tm, b)
			changed(tm, cur().limit, b)
			op = fmt.Sprintf("SetBurstAt(%v, %d)", tm.Sub(base), b)
		default: // TokensAt at another time
			at := tm.Add([]time.Duration{-time.Hour, -1, 1, time.Second, 100 * 365 * 24 * time.Hour}[rng.IntN(5)])
			before := mine.bookkeeping()
			m2, x2 := mine.TokensAt(at), x.TokensAt(at)
			op = fmt.Sprintf("TokensAt(%v)=%v", at.Sub(base), m2)
			if after := mine.bookkeeping(); after != before {
				fail("%s changed the limiter: %+v, before %+v", op, after, before)
			}
			if m2 > float64(max(cur().burst, 0))+1e-9 && cur().limit != Inf {
				fail("%s: above the burst", op)
			}
			if parted == "" && math.Abs(m2-x2) > walkTok(x2, topLimit) {
				fail("%s, x/time/rate %v", op, x2)
			}
		}
		log = append(log, op)
		mine.checkAxis(t)
		if parted == "" {
			st.compared++
			if ma, xa := mine.TokensAt(tm), x.TokensAt(tm); math.Abs(ma-xa) > walkTok(xa, topLimit) {
				fail("after %s: balance %v, x/time/rate %v", op, ma, xa)
			}
		}
	}
	if !monotone {
		return
	}

	// The window bound.
	var live []admission
	for _, a := range adms {
		if a.live {
			live = append(live, a)
		}
	}
	slices.SortStableFunc(live, func(a, b admission) int { return a.at.Compare(b.at) })
	changeEnd := func(i int) time.Time {
		if i+1 < len(changes) {
			return changes[i+1].at
		}
		return time.Unix(1<<60, 0) // after every time of the walk
	}
	// bound is the highest burst in force in [a, b] plus the integral of
	// the limit over [a−1ns, b+1ns], or +Inf if the limit was Inf in it.
	bound := func(a, b time.Time) float64 {
		lo, hi := a.Add(-1), b.Add(1)
		burst, sum := 0, 0.0
		for i, c := range changes {
			end := changeEnd(i)
			if c.at.After(b) || end.Before(a) {
				continue
			}
			if c.limit == Inf {
				return math.Inf(1)
			}
			burst = max(burst, c.burst)
			s, e := c.at, end
			if s.Before(lo) {
				s = lo
			}
			if e.After(hi) {
				e = hi
			}
			if e.After(s) && c.limit > 0 {
				sum += float64(c.limit) * e.Sub(s).Seconds()
			}
		}
		return float64(burst) + sum
	}
	for i := range live {
		sum := 0
		for j := i; j < len(live); j++ {
			sum += live[j].n
			st.windows++
			if b := bound(live[i].at, live[j].at); float64(sum) > b*(1+1e-12)+1e-9 {
				fail("%d tokens admitted in [%v, %v], bound %v", sum, live[i].at.Sub(base), live[j].at.Sub(base), b)
			}
		}
	}
	st.admissions += len(live)
}
