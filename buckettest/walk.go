package buckettest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
)

// Walk runs seeds random model-based walks against buckets made by
// newBucket, then a drift run per fractional rate. Each walk interleaves
// every operation that changes a bucket's state: TryAcquireN (0, negative,
// the capacity, above it, MaxInt64 and MinInt64 included), Tokens, blocking
// AcquireN (admitted at once, reserved and asleep on the FakeClock, or
// ErrUnsatisfiable), AcquireN under a real deadline an hour away (ErrDeadline
// when the wait is longer, a reservation asleep when it is shorter) and with
// a context already cancelled or expired, cancellations of sleeping waiters
// (the tail rule: undone when nothing was reserved after them, forfeited
// when something was, admitted when their wake has passed on the limiter's
// clock), and clock steps: a nanosecond, to a wake, a token period, past the
// capacity's refill, up to 100 years, to and past refill's horizon, back
// behind the limiter's latest reading and before its creation. Rates include
// 1/3 and 1e-6 per second and 0.
//
// Every decision, every Tokens reading, every wake time and every
// cancellation's outcome is compared with a reference written from the
// design contract and internal/refill's package doc, not from the buckets'
// code: the balance is min(capacity, V(t) − z) in units of 2^-k tokens,
// V(t) = ⌊t·R/2^64⌋ with R the rate in units per ns scaled by 2^64 and
// rounded up, k the largest with capacity·2^k < 2^61 and R <= 2^64; taking
// n units moves z to max(z, V(t) − capacity) + n; a reservation wakes at
// the first t with V(t) >= z; a cancelled one gives its n back only if z is
// still its end. Stale readings follow the limiter's declared rule: the
// latest reading applied by a state change (mutexbucket, casbucket), or the
// reading's own moment (NoLatestReading: gcra, whose Tokens also reports a
// negative balance only before the latest wake of a reservation). Every
// admission is recorded at its instant on the limiter's clock (a waiter at
// its wake), and the bound of rule 4, capacity + rate × T + 1, is checked on
// every window of every walk.
//
// A limiter with Shards() (shardedbucket) is walked on a clock that never
// steps back (rule 5's exception). With one shard it must be exact, as gcra
// is. With more its decisions may fall short of the reference (rule 4), so
// the walk checks what the package doc promises instead: the bound, the
// edge cases, that nothing overtakes a waiting reservation, that a wait is
// at most what n tokens take to refill, that ErrDeadline leaves Tokens as
// it was, and, from the first reservation on (the bucket is then one central
// word, exact) until an admission leaves two tokens (a spread needs at
// least that), every decision, reading, wake and cancellation exactly.
func Walk[L admit.Limiter](t *testing.T, newBucket Factory[L], seeds int) {
	mk := func(c int64, r float64, opts ...admit.Option) (admit.Limiter, error) { return newBucket(c, r, opts...) }
	capacities := []int64{1, 2, 3, 5, 13, 100, 1e9}
	rates := []float64{1.0 / 3, 1e-6, 0, 1, 7.3, 1000, 1e9, 0.5, 2.5e-6}
	starts := []int64{0, 1 << 40, -(1 << 62), 1 << 61}
	st := &WalkStats{}
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 0x6275636b))
		c := capacities[r.IntN(len(capacities))]
		rate := rates[r.IntN(len(rates))]
		origin := starts[r.IntN(len(starts))]
		if !t.Run(fmt.Sprintf("seed=%d/capacity=%d/rate=%v", seed, c, rate), func(t *testing.T) {
			walkOne(t, mk, c, rate, origin, 150, r, st)
		}) {
			return // the first failing walk is enough to read
		}
	}
	t.Logf("%d walks: %+v", seeds, *st)
	if seeds >= 200 && st.Exact+st.Inexact == seeds { // every walk ran: no -run filter
		st.reached(t)
	}
	for _, rate := range []float64{1.0 / 3, 1e-6, 7.3, 0.1} {
		t.Run(fmt.Sprintf("drift/rate=%v", rate), func(t *testing.T) { drift(t, mk, rate) })
	}
}

// WalkStats counts what the walks reached, so that a walk that stops
// reaching a case fails instead of passing vacuously.
type WalkStats struct {
	Tries, Admitted, Tokens, AtOnce, Reserved, DeadlineErr, DeadlineSleep int
	Never, Undone, Forfeited, DueOnCancel, Woken, Precancelled, Backward  int
	BeforeOrigin, Horizon, Years, StaleTakes, Exact, Inexact              int
	ExactOps, InexactOps                                                  int // takes decided against the model, or only checked
}

func (s *WalkStats) reached(t *testing.T) {
	t.Helper()
	if s.Admitted < 1000 || s.Reserved < 200 || s.DeadlineErr < 20 || s.DeadlineSleep < 20 || s.Never < 20 ||
		s.Undone < 50 || s.Forfeited < 20 || s.Woken < 100 || s.Precancelled < 20 || s.Horizon < 10 || s.Years < 50 ||
		s.DueOnCancel < 20 {
		t.Errorf("the walks no longer reach every case: %+v", *s)
	}
}

// horizonNs is refill.Horizon: elapsed time stops there.
const horizonNs = StreamHorizon

// maxDebt is how far below zero reservations may take a balance.
const maxDebt = -int64(1) << 62

// refModel is the reference token bucket, in units of 2^-shift tokens.
type refModel struct {
	Stream
	capTok int64
	cap    int64
	own    bool  // NoLatestReading: a stale reading sees its own moment
	z      int64 // empty point: balance = min(cap, V(t) − z)
	last   int64 // the latest reading a state change applied (latest rule)
	debt   int64 // the latest wake of any reservation (own rule's Tokens)
}

func newRefModel(capacity int64, rate float64, own bool) *refModel {
	m := &refModel{Stream: NewStream(capacity, rate), capTok: capacity, own: own}
	m.cap = capacity << m.Shift
	m.z = -m.cap
	return m
}

// at is the moment a reading e is decided at.
func (m *refModel) at(e int64) int64 {
	if m.own {
		return e
	}
	return max(e, m.last)
}

func (m *refModel) balance(te int64) int64 { return min(m.cap, m.V(te)-m.z) }

func (m *refModel) tokens(e int64) float64 {
	bal := m.balance(m.at(e))
	if m.own && e >= m.debt {
		bal = max(bal, 0)
	}
	return m.Tokens(bal)
}

// take applies TryAcquireN(n) at reading e and reports the decision and the
// instant it was admitted at.
func (m *refModel) take(e, n int64) (bool, int64) {
	te := m.at(e)
	need := n << m.Shift
	if m.balance(te) < need {
		return false, 0
	}
	m.z = max(m.z, m.V(te)-m.cap) + need
	if !m.own {
		m.last = te
	}
	return true, te
}

// plan is AcquireN(n)'s reserve step at reading e: admitted at once (wake
// == te), a reservation waking at wake, or never. It changes nothing.
func (m *refModel) plan(e, n int64) (te, wake int64, never bool) {
	te = m.at(e)
	need := n << m.Shift
	bal := m.balance(te)
	if bal >= need {
		return te, te, false
	}
	if bal-need < maxDebt {
		return te, 0, true
	}
	wake = m.Reach(max(m.z, m.V(te)-m.cap) + need)
	return te, wake, wake > horizonNs
}

// reserve applies a reservation planned at te, and returns its end.
func (m *refModel) reserve(te, wake, n int64) (end int64) {
	m.z = max(m.z, m.V(te)-m.cap) + n<<m.Shift
	if !m.own {
		m.last = te
	}
	m.debt = max(m.debt, wake)
	return m.z
}

// cancel applies the undo of a reservation of n that ended at end, at
// reading e: due (the caller is admitted), undone or forfeited.
func (m *refModel) cancel(e, n, end int64) (due, undone bool) {
	te := m.at(e)
	if m.V(te) >= end {
		return true, false
	}
	if m.z != end {
		return false, false
	}
	m.z = end - n<<m.Shift
	if !m.own {
		m.last = te
	}
	return false, true
}

// walkWaiter is a sleeping AcquireN the model holds a reservation for.
type walkWaiter struct {
	n, end, wake int64
	cancel       context.CancelFunc // the deadline context's, if any
	deaf         bool               // asleep until cancelled, its wake passed or not
}

type bucketWalker struct {
	t        *testing.T
	rate     float64
	capacity int64
	clk      *FakeClock
	l        admit.Limiter
	ws       *Waiters
	m        *refModel
	origin   int64
	shards   int  // 0 unless the limiter has Shards()
	exact    bool // the model is the limiter's state (always, unless shards > 1)
	forward  bool // the clock never steps back
	pending  map[int]*walkWaiter
	wakes    int64 // the latest wake of any reservation, for a sharded model's debt
	adm      []Admission
	trace    []string
	st       *WalkStats
	period   int64 // ns per token, 1 s for rate 0
	seen     int64 // the latest reading a take was made at, for the stats
	r        *rand.Rand
}

func walkOne(t *testing.T, mk func(int64, float64, ...admit.Option) (admit.Limiter, error), capacity int64, rate float64, origin int64, steps int, r *rand.Rand, st *WalkStats) {
	clk := NewFakeClock(origin)
	l, err := mk(capacity, rate, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	k := &bucketWalker{t: t, rate: rate, capacity: capacity, clk: clk, l: l, ws: NewWaiters(l, clk), origin: origin,
		pending: map[int]*walkWaiter{}, st: st, exact: true, period: int64(time.Second), r: r}
	defer k.ws.Close()
	_, own := l.(NoLatestReading)
	if sh, ok := l.(interface{ Shards() int }); ok {
		k.shards, k.forward, own = sh.Shards(), true, true
		k.exact = k.shards == 1
	}
	k.m = newRefModel(capacity, rate, own)
	if rate > 0 {
		k.period = max(1, int64(math.Ceil(1e9/rate)))
	}
	if k.exact {
		st.Exact++
	} else {
		st.Inexact++
	}
	for range steps {
		k.step(r)
		if t.Failed() {
			return
		}
	}
	for _, i := range k.pendingIDs() {
		k.cancel(i)
		if t.Failed() {
			return
		}
	}
	if err := CheckAdmissions(capacity, rate, k.adm); err != nil {
		k.fail("rule 4: %v", err)
	}
}

func (k *bucketWalker) fail(format string, args ...any) {
	k.t.Helper()
	tail := k.trace[max(0, len(k.trace)-40):]
	k.t.Fatalf("%s\ncapacity=%d rate=%v origin=%d shards=%d exact=%v unit=2^-%d; last steps:\n  %s", fmt.Sprintf(format, args...),
		k.capacity, k.rate, k.origin, k.shards, k.exact, k.m.Shift, strings.Join(tail, "\n  "))
}

func (k *bucketWalker) log(format string, args ...any) {
	k.trace = append(k.trace, fmt.Sprintf("[e=%d z=%d last=%d] ", k.elapsed(), k.m.z, k.m.last)+fmt.Sprintf(format, args...))
}

// elapsed is the limiter's reading of its clock: since New, clamped to
// [0, horizon].
func (k *bucketWalker) elapsed() int64 {
	raw := k.clk.Now()
	switch {
	case raw <= k.origin:
		return 0
	case uint64(raw)-uint64(k.origin) >= uint64(horizonNs):
		return horizonNs
	}
	return int64(uint64(raw) - uint64(k.origin))
}

func (k *bucketWalker) pendingIDs() []int {
	ids := make([]int, 0, len(k.pending))
	for i := range k.pending {
		ids = append(ids, i)
	}
	slices.Sort(ids)
	return ids
}

// waiting reports whether a reservation is still waiting at reading e.
func (k *bucketWalker) waiting(e int64) bool {
	for _, w := range k.pending {
		if w.wake > k.m.at(e) {
			return true
		}
	}
	return false
}

func (k *bucketWalker) size(r *rand.Rand) int64 {
	switch r.IntN(16) {
	case 0:
		return 0
	case 1:
		return -1 - r.Int64N(3)
	case 2:
		return k.capacity + 1
	case 3:
		return k.capacity
	case 4:
		return []int64{math.MaxInt64, math.MinInt64, 1 << 62}[r.IntN(3)]
	}
	return 1 + r.Int64N(min(k.capacity, 4))
}

func (k *bucketWalker) step(r *rand.Rand) {
	switch op := r.IntN(24); {
	case op < 7:
		k.try(k.size(r))
	case op < 9:
		k.tokens()
	case op < 12:
		if len(k.pending) < 6 {
			k.acquire(k.size(r), false)
		}
	case op < 13:
		if len(k.pending) < 6 {
			k.acquire(k.size(r), true)
		}
	case op < 14:
		k.doneContext(r, k.size(r))
	case op < 16:
		if ids := k.pendingIDs(); len(ids) > 0 {
			k.cancel(ids[r.IntN(len(ids))])
		}
	default:
		k.move(r)
	}
}

func (k *bucketWalker) record(at, n int64) { k.adm = append(k.adm, Admission{At: at, N: n}) }

// afterTake leaves exact mode for a sharded bucket once an admission may
// have spread it again.
func (k *bucketWalker) afterTake(e int64) {
	if k.shards > 1 && k.exact && k.m.balance(k.m.at(e)) >= min(2, k.capacity)<<k.m.Shift {
		k.exact = false
	}
}

func (k *bucketWalker) try(n int64) {
	e := k.elapsed()
	if e < k.seen {
		k.st.StaleTakes++
	}
	k.seen = max(k.seen, e)
	if k.exact {
		k.st.ExactOps++
	} else {
		k.st.InexactOps++
	}
	got := k.l.TryAcquireN(n)
	k.st.Tries++
	k.log("TryAcquireN(%d) = %v", n, got)
	if n <= 0 || n > k.capacity {
		if got != (n == 0) {
			k.fail("TryAcquireN(%d) = %v, rule 8 says %v", n, got, n == 0)
		}
		return
	}
	if got {
		k.st.Admitted++
		if k.waiting(e) {
			k.fail("TryAcquireN(%d) overtook a reservation still waiting (rule 9)", n)
		}
	}
	if !k.exact {
		if got {
			k.record(e, n)
		}
		return
	}
	want, at := k.m.take(e, n)
	if got != want {
		k.fail("TryAcquireN(%d) = %v, the model says %v (balance %v at %d)", n, got, want, k.m.Tokens(k.m.balance(k.m.at(e))), k.m.at(e))
	}
	if want {
		k.record(at, n)
		k.afterTake(e)
	}
}

func (k *bucketWalker) tokens() {
	e := k.elapsed()
	got := k.l.Tokens()
	k.st.Tokens++
	k.log("Tokens() = %v", got)
	if !k.exact {
		if got < 0 || got > float64(k.capacity) {
			k.fail("Tokens() = %v outside [0, %d] with no reservation waiting", got, k.capacity)
		}
		return
	}
	if want := k.m.tokens(e); got != want {
		k.fail("Tokens() = %v, the model says %v", got, want)
	}
}

// acquire calls AcquireN(n) in a waiter; with deadline, under a real
// deadline an hour away, where the outcome does not depend on how long the
// call takes in real time.
func (k *bucketWalker) acquire(n int64, deadline bool) {
	e := k.elapsed()
	const hour = int64(time.Hour)
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if deadline {
		if k.exact && n > 0 && n <= k.capacity {
			te, wake, never := k.m.plan(e, n)
			if !never && wake != te && wake-e > hour-int64(time.Minute) && wake-e < hour+int64(time.Minute) {
				return // too close to the deadline to call deterministic
			}
		} else if !k.exact && n > 0 && n <= k.capacity && k.rate > 0 && n*k.period > hour/2 {
			return // the wait is not known, and could be near the deadline
		}
		ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
	}
	before := k.l.Tokens()
	deaf := k.r.IntN(4) == 0
	i := k.ws.start(ctx, n, deaf)
	err, returned := k.ws.Result(i)
	k.log("AcquireN(%d, deadline=%v): returned=%v err=%v", n, deadline, returned, err)
	if n <= 0 || n > k.capacity {
		cancel()
		if !returned || (n == 0) != (err == nil) || n != 0 && !errors.Is(err, admit.ErrUnsatisfiable) {
			k.fail("AcquireN(%d) = %v, returned %v: rule 8", n, err, returned)
		}
		return
	}
	var te, wake int64
	var never bool
	if k.exact {
		te, wake, never = k.m.plan(e, n)
	}
	switch {
	case returned && err == nil:
		k.st.AtOnce++
		k.st.Admitted++
		cancel()
		if k.waiting(e) {
			k.fail("AcquireN(%d) admitted at once, overtaking a reservation still waiting (rule 9)", n)
		}
		if !k.exact {
			k.record(e, n)
			return
		}
		if wake != te || never {
			k.fail("AcquireN(%d) admitted at once; the model says wake %d from %d, never %v", n, wake, te, never)
		}
		k.m.take(e, n)
		k.record(te, n)
		k.afterTake(e)
	case returned && errors.Is(err, admit.ErrUnsatisfiable):
		k.st.Never++
		cancel()
		if k.exact && !never {
			k.fail("AcquireN(%d) = %v; the model says wake %d", n, err, wake)
		}
		if !k.exact && k.rate > 0 && e < horizonNs-k.period*k.capacity {
			k.fail("AcquireN(%d) = %v at %d with a non-zero rate", n, err, e)
		}
	case returned && errors.Is(err, admit.ErrDeadline):
		k.st.DeadlineErr++
		cancel()
		if !deadline || !errors.Is(err, context.DeadlineExceeded) {
			k.fail("AcquireN(%d) = %v: ErrDeadline without a deadline, or not a DeadlineExceeded", n, err)
		}
		if k.exact && (never || wake-e <= int64(time.Hour)) {
			k.fail("AcquireN(%d) = %v; the model says wake %d from reading %d, never %v", n, err, wake, e, never)
		}
		if after := k.l.Tokens(); after != before {
			k.fail("AcquireN(%d) = %v consumed: Tokens %v before, %v after (rule 9)", n, err, before, after)
		}
	case returned:
		cancel()
		k.fail("AcquireN(%d) = %v", n, err)
	default:
		got, _ := k.ws.WakeTime(i)
		got -= k.origin
		if deadline {
			k.st.DeadlineSleep++
		}
		k.st.Reserved++
		if !k.exact {
			// The bucket is now one central word: its debt is exact from
			// here, and the wake is at most n tokens' refill away.
			if got <= e || got > k.m.Reach(k.m.V(e)+n<<k.m.Shift) {
				k.fail("AcquireN(%d) sleeps until %d from reading %d: more than %d tokens' refill", n, got, e, n)
			}
			k.exact = true
			k.m.z = k.m.V(got) - n<<k.m.Shift
			k.m.debt = k.wakes
			te, wake, never = k.m.plan(e, n)
		}
		if never || wake == te || got != wake {
			k.fail("AcquireN(%d) sleeps until %d; the model says wake %d from %d, never %v", n, got, wake, te, never)
		}
		end := k.m.reserve(te, wake, n)
		k.wakes = max(k.wakes, wake)
		k.pending[i] = &walkWaiter{n: n, end: end, wake: wake, cancel: cancel, deaf: deaf}
	}
}

// doneContext calls AcquireN with a context that has already ended: it
// returns ctx.Err() unchanged and changes nothing.
func (k *bucketWalker) doneContext(r *rand.Rand, n int64) {
	var ctx context.Context
	var cancel context.CancelFunc
	want := context.Canceled
	if r.IntN(2) == 0 {
		ctx, cancel = context.WithCancel(context.Background())
	} else {
		ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		want = context.DeadlineExceeded
	}
	cancel()
	before := k.l.Tokens()
	err := k.l.AcquireN(ctx, n)
	k.st.Precancelled++
	k.log("AcquireN(done ctx, %d) = %v", n, err)
	if err != want {
		k.fail("AcquireN(%d) on an ended context = %v, want %v unchanged (rule 9)", n, err, want)
	}
	if after := k.l.Tokens(); after != before {
		k.fail("AcquireN(%d) on an ended context consumed: Tokens %v, then %v", n, before, after)
	}
}

func (k *bucketWalker) cancel(i int) {
	w := k.pending[i]
	delete(k.pending, i)
	e := k.elapsed()
	k.ws.Cancel(i)
	err := k.ws.Wait(i)
	w.cancel()
	due, undone := k.m.cancel(e, w.n, w.end)
	k.log("cancel waiter %d (n=%d wake %d) = %v; model due=%v undone=%v", i, w.n, w.wake, err, due, undone)
	switch {
	case due:
		if err != nil {
			k.fail("waiter %d due at %d on the limiter's clock (%d) returned %v on cancel, want nil", i, w.wake, k.m.at(e), err)
		}
		k.st.DueOnCancel++
		k.record(w.wake, w.n)
	case err != context.Canceled:
		k.fail("cancelled waiter %d (wake %d, limiter at %d) returned %v, want context.Canceled", i, w.wake, k.m.at(e), err)
	case undone:
		k.st.Undone++
	default:
		k.st.Forfeited++
	}
}

// move steps the raw clock and collects the waiters it wakes, each
// admitted at its wake.
func (k *bucketWalker) move(r *rand.Rand) {
	raw := k.clk.Now()
	var to int64
	switch r.IntN(12) {
	case 0:
		to = raw + 1
	case 1, 2: // to a reservation's wake, or a nanosecond either side
		if ids := k.pendingIDs(); len(ids) > 0 {
			to = k.origin + k.pending[ids[r.IntN(len(ids))]].wake - 1 + r.Int64N(3)
		} else {
			to = raw + r.Int64N(k.period) + 1
		}
	case 3:
		to = raw + r.Int64N(2*k.period) + 1
	case 4: // refill past the capacity
		to = sat(raw, float64(k.period)*float64(min(k.capacity, 1<<20))*float64(1+r.Int64N(3)))
	case 5: // up to 100 years
		if k.forward && r.IntN(6) != 0 {
			to = raw + r.Int64N(2*k.period) + 1 // time never comes back: keep it alive
			break
		}
		k.st.Years++
		to = sat(raw, float64(r.Int64N(hundredYears)))
	case 6: // to the horizon and past it, rarely
		if r.IntN(4) == 0 && (!k.forward || r.IntN(6) == 0) {
			to = k.origin + horizonNs - 1 + r.Int64N(3)
		} else {
			to = raw + r.Int64N(k.period/3+1)
		}
	case 7, 8: // back behind the latest reading
		to = raw - 1 - r.Int64N(2*k.period)
	case 9: // before creation
		to = k.origin - 1 - r.Int64N(k.period)
	default:
		to = raw + r.Int64N(k.period/3+1)
	}
	if k.forward {
		to = max(to, raw)
	}
	// Keep the raw clock where origin + horizon still fits an int64.
	to = min(max(to, math.MinInt64/2), k.origin+horizonNs+1<<40)
	if k.forward {
		to = max(to, raw)
	}
	switch {
	case to <= k.origin:
		k.st.BeforeOrigin++
	case to < raw:
		k.st.Backward++
	case to-k.origin >= horizonNs:
		k.st.Horizon++
	}
	k.clk.Set(to)
	k.ws.Advance(0)
	k.log("clock to %d", to-k.origin)
	for _, i := range k.pendingIDs() {
		w := k.pending[i]
		err, returned := k.ws.Result(i)
		if !returned {
			if k.origin+w.wake <= to && !w.deaf {
				k.fail("waiter %d with wake %d is still asleep at %d", i, w.wake, to-k.origin)
			}
			continue
		}
		if err != nil || w.deaf {
			k.fail("waiter %d (deaf %v) woke with %v", i, w.deaf, err)
		}
		if k.origin+w.wake > to {
			k.fail("waiter %d returned at %d, before its wake %d (rule 9)", i, to-k.origin, w.wake)
		}
		w.cancel()
		delete(k.pending, i)
		k.st.Woken++
		k.record(w.wake, w.n)
	}
}

// hundredYears is 100 Julian years in ns.
const hundredYears = int64(36525 * 24 * time.Hour)

// sat is raw + d, saturated well inside the int64 range.
func sat(raw int64, d float64) int64 {
	if f := float64(raw) + d; f >= 1<<62 {
		return 1 << 62
	}
	return raw + int64(d)
}

// drift is rule 6 on a long run of a fractional rate: 20,000 uneven steps,
// each taking every whole token there is. What was admitted plus the
// balance left must be the capacity plus the exact refill, to the unit,
// and the bucket must have followed the model at every step.
func drift(t *testing.T, mk func(int64, float64, ...admit.Option) (admit.Limiter, error), rate float64) {
	const capacity, steps = 3, 20_000
	clk := NewFakeClock(1 << 40)
	l, err := mk(capacity, rate, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	period := 1e9 / rate
	r := rand.New(rand.NewPCG(7, uint64(rate*1e9)))
	var admitted, elapsed int64
	for l.TryAcquire() { // empty, so that no refill is lost to the cap
		admitted++
	}
	for i := range steps {
		d := 1 + r.Int64N(min(int64(period*0.9), 2*hundredYears/steps))
		clk.Advance(time.Duration(d))
		elapsed += d
		for l.TryAcquire() {
			admitted++
		}
		if i%1000 == 0 && !l.TryAcquireN(0) {
			t.Fatal("TryAcquireN(0) is false")
		}
	}
	m := newRefModel(capacity, rate, false)
	// The exact refill, from the rate's decimal form.
	dec, _ := new(big.Rat).SetString(strconv.FormatFloat(rate, 'g', -1, 64))
	exact := new(big.Rat).Mul(dec, big.NewRat(elapsed, 1e9))
	exact.Add(exact, big.NewRat(capacity, 1))
	got := new(big.Rat).Add(big.NewRat(admitted, 1), new(big.Rat).SetFloat64(l.Tokens()))
	diff := new(big.Rat).Sub(got, exact)
	// One unit, plus what Tokens' conversion to a float64 may round off.
	tol := new(big.Rat).SetFloat64(m.Tokens(1) + math.Ldexp(capacity, -50))
	if new(big.Rat).Abs(diff).Cmp(tol) > 0 {
		t.Fatalf("after %v at %v/s: admitted %d + balance %v = %s, the exact refill says %s: off by %s, more than one unit (rule 6)",
			time.Duration(elapsed), rate, admitted, l.Tokens(), got.FloatString(12), exact.FloatString(12), diff.FloatString(12))
	}
	if admitted < 1000 {
		t.Fatalf("admitted only %d in %d steps", admitted, steps)
	}
}
