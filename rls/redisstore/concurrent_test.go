package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/redisstore"
	"github.com/redis/go-redis/v9"
)

// splitRound runs concurrent split requests on fresh keys and returns
// the tokens admitted per key (held, non-debt hits of admitted requests).
func splitRound(t *testing.T, s *redisstore.Store, c *redis.ClusterClient, pfx string, round int, refill bool, workers, per int, seed uint64) map[string]int64 {
	ctx := context.Background()
	A := fmt.Sprintf("a%d", round)
	B := otherMaster(t, c, pfx, A)
	E := otherMaster(t, c, pfx, "e"+A)
	for i := 0; E == B || sameMaster(t, c, pfx, E, A); i++ {
		E = otherMaster(t, c, pfx, fmt.Sprint("e", i, A))
	}
	cnt, period := int64(0), time.Hour
	if refill {
		cnt, period = 10, time.Second
	}
	lim := func(k string, cp int64) rls.Hit { return rls.Hit{Key: k, Capacity: cp, Count: cnt, Period: period} }
	// E exhausted, never refilling
	eh := rls.Hit{Key: E, Capacity: 1, Count: 0, Period: time.Hour, N: 1}
	decide1(t, s, eh)
	var mu sync.Mutex
	adm := map[string]int64{}
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(round*1000+w)))
			for range per {
				var req []rls.Hit
				add := func(h rls.Hit, n int64) { h.N = n; req = append(req, h) }
				switch r.IntN(11) {
				case 8:
					h := lim(A, 3)
					h.Debt, h.Shadow = true, r.IntN(2) == 0
					add(h, int64(r.IntN(4)))
					add(lim(A, 5), 1)
					add(eh, 1)
				case 9:
					add(lim(A, 5), 2)
					h := lim(A, 3)
					h.Debt, h.Shadow = true, r.IntN(2) == 0
					add(h, int64(r.IntN(2)))
					add(lim(B, 4), 1)
				case 10:
					h := lim(A, 5)
					h.Shadow = true
					add(h, 3)
					add(lim(A, 3), 1)
					add(lim(B, 4), 1)
				case 0:
					add(lim(A, 5), 1)
					add(lim(B, 4), 1)
				case 1:
					add(lim(A, 5), 1)
					add(eh, 1)
				case 2:
					add(lim(A, 5), 1)
					add(lim(A, 3), 1)
					add(lim(B, 4), 1)
				case 3:
					add(lim(B, 4), 1)
					add(rls.Hit{Key: "z", Capacity: 0, N: 1}, 1)
				case 4:
					add(lim(A, 3), 2)
					add(eh, 1)
				case 5:
					add(lim(A, 5), 1)
				case 6:
					add(lim(B, 4), 2)
					add(lim(A, 3), 1)
				case 7:
					add(lim(A, 3), 1)
					add(lim(A, 5), 2)
					add(lim(B, 4), 1)
				}
				r.Shuffle(len(req), func(i, j int) { req[i], req[j] = req[j], req[i] })
				res := make([]rls.Result, len(req))
				ok, err := s.Decide(ctx, req, res)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					for i, h := range req {
						if h.Capacity > 0 && res[i].OK && !h.Debt {
							adm[h.Key] += h.N
						}
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	adm["T"] = time.Since(start).Microseconds()
	adm["A"], adm["B"] = adm[A], adm[B]
	return adm
}

// TestConcurrentSplit: goroutines issue multi-key requests whose
// keys span masters (A under bursts 5 and 3, B burst 4, never refilling),
// some refused by a limit of zero or an exhausted key E on another master
// (A's take is then given back by decideSplit). Over the run A can admit
// at most 5 tokens, B at most 4.
func TestConcurrentSplit(t *testing.T) {
	s, c, pfx := splitStore(t)
	var most, sum int64
	const rounds = 60
	for round := range rounds {
		adm := splitRound(t, s, c, pfx, round, false, 16, 6, 1)
		if adm["A"] > 5 || adm["B"] > 4 {
			t.Errorf("round %d: admitted A %d (max 5), B %d (max 4)", round, adm["A"], adm["B"])
		}
		most, sum = max(most, adm["A"]), sum+adm["A"]
	}
	t.Logf("A admitted at most %d in a round, %.2f on average", most, float64(sum)/rounds)
}

func sameMaster(t *testing.T, c *redis.ClusterClient, pfx, a, b string) bool {
	ctx := context.Background()
	ma, err1 := c.MasterForKey(ctx, pfx+a)
	mb, err2 := c.MasterForKey(ctx, pfx+b)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return ma.Options().Addr == mb.Options().Addr
}

// TestConcurrentSplitRefill: as TestConcurrentSplit with
// A and B refilling 10 a second: A admits at most 5 + 10·T + 1.
func TestConcurrentSplitRefill(t *testing.T) {
	s, c, pfx := splitStore(t)
	for round := range 20 {
		adm := splitRound(t, s, c, pfx, 1000+round, true, 16, 60, 2)
		T := float64(adm["T"]) / 1e6
		bA, bB := 5+10*T+1, 4+10*T+1
		if float64(adm["A"]) > bA || float64(adm["B"]) > bB {
			t.Errorf("round %d over %.3f s: admitted A %d (bound %.1f), B %d (bound %.1f)", round, T, adm["A"], bA, adm["B"], bB)
		}
	}
}

// TestGiveBackDeletesMarkViaOtherTake: k is marked under S (burst 5,
// never refilling), full under S only because a carry clamped 9 of L's 10
// (L: burst 10, never refilling): under L it holds 5. Two split requests
// R1 and R2 each take 1 under S and are refused by other nodes. R1's take
// is from the marked (clamp-full) bucket, so its give-back has flag 8; R2's
// is from a bucket in debt (1), so its give-back has none. R1's give-back
// comes first (4 of 5 under S, not full: written as debt 1, the mark's
// meaning gone), then R2's brings the debt to 0 and, without flag 8 and
// with the key not read as marked, deletes it: full under every limit.
// Had neither request taken, k would still be marked: 5 under L.
// Expected: a take of 10 under L refused (5 left). Actual: admitted
// (10 under L): over-admission of 5 tokens; over the walk L, a burst of
// 10 that never refills, admits 11 (1 in the setup, then 10).
func TestGiveBackDeletesMarkViaOtherTake(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		s, c, p := singleStoreOf(t)
		s.TrackForTest()
		markViaOtherTake(t, s, c, p)
	})
	t.Run("cluster", func(t *testing.T) {
		s, c, p := splitStore(t)
		markViaOtherTake(t, s, c, p)
	})
}

func markViaOtherTake(t *testing.T, s *redisstore.Store, c redis.UniversalClient, p string) {
	ctx := context.Background()
	L := rh("m2", 10, 0, 1)
	S := rh("m2", 5, 0, 0)
	if ok, _ := decide1(t, s, L, S); !ok { // 9 under L, clamped to 5 under S: marked
		t.Fatal("setup refused")
	}
	if v, _ := c.Get(ctx, p+"m2").Result(); !strings.HasSuffix(v, ":c") {
		t.Fatalf("not marked: %q", v)
	}
	S.N = 1
	tk1 := take(t, s, S) // R1: from the clamp-full bucket (flag 8)
	tk2 := take(t, s, S) // R2: from debt 1 (no flag 8)
	giveBack(t, s, S, tk1)
	giveBack(t, s, S, tk2)
	v, _ := c.Get(ctx, p+"m2").Result()
	L.N = 10
	if ok, _ := decide1(t, s, L); ok {
		t.Errorf("10 under L admitted after both give-backs (key %q); had neither taken, k holds 5 under L", v)
	}
	// Control: the same key with neither take holds 5 under L.
	L.N, S.N = 1, 0
	L.Key, S.Key = "m2c", "m2c"
	decide1(t, s, L, S)
	L.N = 10
	if ok, _ := decide1(t, s, L); ok {
		t.Error("control: 10 under L admitted from the mark")
	}
}

// TestGiveBackMarksExpiredKey: k is marked under S (burst 5, 10 a
// second: the mark expires 500 ms later) after a carry from L (burst 10,
// never refilling) clamped 9 to 5. A split request R1 takes 1 under S
// from the mark (flag 8; k now debt 1, expiring 100 ms later) and is
// refused elsewhere; its give-back comes 700 ms later, when k has expired
// (absent: full under every limit, as the mark alone would be by then).
// The give-back returns nothing (absent) but, with flag 8, writes a fresh
// mark (PX 500 ms): k holds 5 under L instead of 10. Expected: 10 under L
// admitted (had R1 never taken, the mark would have expired at 500 ms).
// Actual: refused: under-admission of 5 tokens for up to 500 ms; a
// give-back that takes tokens away.
func TestGiveBackMarksExpiredKey(t *testing.T) {
	s, c, p := singleStoreOf(t)
	s.TrackForTest()
	ctx := context.Background()
	L := rh("me", 10, 0, 1)
	S := rls.Hit{Key: "me", Capacity: 5, Count: 10, Period: time.Second}
	if ok, _ := decide1(t, s, L, S); !ok {
		t.Fatal("setup refused")
	}
	if v, _ := c.Get(ctx, p+"me").Result(); !strings.HasSuffix(v, ":c") {
		t.Fatalf("not marked: %q", v)
	}
	S.N = 1
	tk := take(t, s, S)
	time.Sleep(700 * time.Millisecond)
	if n, _ := c.Exists(ctx, p+"me").Result(); n != 0 {
		t.Fatal("k has not expired")
	}
	giveBack(t, s, S, tk)
	v, _ := c.Get(ctx, p+"me").Result()
	L.N = 10
	if ok, _ := decide1(t, s, L); !ok {
		t.Errorf("10 under L refused after a give-back to an expired key (now %q)", v)
	}
}

// giveBackHook is a go-redis hook that runs do before every give-back
// script (a negative cost among its arguments); an error from do fails
// the script unsent, as a lost connection would.
type giveBackHook struct{ do func() error }

func (giveBackHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (giveBackHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h giveBackHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasPrefix(s, "-") {
				if _, err := strconv.Atoi(s); err == nil {
					if err := h.do(); err != nil {
						cmd.SetErr(err)
						return err
					}
					break
				}
			}
		}
		return next(ctx, cmd)
	}
}

// failGiveBacks fails every give-back with a network-like error.
var failGiveBacks = giveBackHook{func() error {
	return fmt.Errorf("test: give-back lost: %w", context.DeadlineExceeded)
}}

// lateGiveBacks delays every give-back by up to 3 ms, as a network would.
var lateGiveBacks = giveBackHook{func() error {
	time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
	return nil
}}

// TestFailedGiveBack: a split request takes 1 from A and is refused by
// an exhausted key E on another master; its give-back to A fails. The
// request stays refused, with no error (the refusal stands: a failure
// mode must not admit it), and A's token stays taken. (docs/rls.md said,
// until 2026-12-07, that the call failed with Unavailable; a review.)
func TestFailedGiveBack(t *testing.T) {
	s2, c2, pfx := splitStore(t)
	c2.AddHook(failGiveBacks)
	E := otherMaster(t, c2, pfx, "fa")
	decide1(t, s2, rh(E, 1, 0, 1))
	res := make([]rls.Result, 2)
	ok, err := s2.Decide(context.Background(), []rls.Hit{rh("fa", 5, 0, 1), rh(E, 1, 0, 1)}, res)
	if ok || err != nil {
		t.Errorf("a failed give-back: admitted %v, error %v; want refused, no error", ok, err)
	}
	// its token stays taken: 4 left
	if _, r := decide1(t, s2, rh("fa", 5, 0, 0)); r[0].Remaining != 4 {
		t.Errorf("%d left, want 4 (the failed give-back leaves its take)", r[0].Remaining)
	}
}

// TestConcurrentMarks (give-backs up to 3 ms late): on the Cluster through Decide, key A under
// L (burst 10) and S (burst 5), neither refilling; E, on another master,
// is exhausted. Goroutines send requests that take 1 under L and then
// check under S (leaving A marked when it has more than 5), requests that
// take 1 under S and are refused by E (their take given back), and plain
// takes under S or L. Over the run A admits at most 10 tokens whatever
// the interleaving.
func TestConcurrentMarks(t *testing.T) {
	s, c, pfx := splitStore(t)
	c.AddHook(lateGiveBacks)
	ctx := context.Background()
	worst := int64(0)
	for round := range 300 {
		A := fmt.Sprintf("cm%d", round)
		E := otherMaster(t, c, pfx, A)
		decide1(t, s, rh(E, 1, 0, 1))
		var adm atomic.Int64
		if round%2 == 1 { // start marked: 1 under L, then 5 of 5 under S
			decide1(t, s, rh(A, 10, 0, 1), rh(A, 5, 0, 0))
			adm.Add(1)
		}
		var wg sync.WaitGroup
		for w := range 12 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for range 8 {
					var req []rls.Hit
					switch k := r.IntN(10); {
					case k < 2:
						req = []rls.Hit{rh(A, 10, 0, 1), rh(A, 5, 0, 0)}
					case k < 8:
						req = []rls.Hit{rh(A, 5, 0, 1), rh(E, 1, 0, 1)}
					case k < 9:
						req = []rls.Hit{rh(A, 5, 0, 1)}
					default:
						req = []rls.Hit{rh(A, 10, 0, 1)}
					}
					res := make([]rls.Result, len(req))
					ok, err := s.Decide(ctx, req, res)
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						for i, h := range req {
							if h.Key == A && res[i].OK {
								adm.Add(h.N)
							}
						}
					}
				}
			})
		}
		wg.Wait()
		// drain what is left under L
		for {
			ok, _ := decide1(t, s, rh(A, 10, 0, 1))
			if !ok {
				break
			}
			adm.Add(1)
		}
		worst = max(worst, adm.Load())
		if adm.Load() > 10 {
			t.Errorf("round %d: A admitted %d tokens, burst 10 never refilling", round, adm.Load())
		}
	}
	t.Logf("most admitted: %d", worst)
}

// TestConcurrentMarkDecide: TestGiveBackDeletesMarkViaOtherTake
// through Decide on the Cluster: A marked (1 taken under L, burst 10,
// then 5 of 5 under S), then two concurrent requests take 1 under S and
// are refused by an exhausted E on another master, their give-backs up to
// 3 ms late. Then A is drained under L. Expected: 1 + 5 = 6 admitted over
// the round at most (10 never refilling at the very most). Actual: some
// rounds admit 11.
func TestConcurrentMarkDecide(t *testing.T) {
	s, c, pfx := splitStore(t)
	c.AddHook(lateGiveBacks)
	ctx := context.Background()
	bad, worst := 0, int64(0)
	for round := range 200 {
		A := fmt.Sprintf("cmd%d", round)
		E := otherMaster(t, c, pfx, A)
		decide1(t, s, rh(E, 1, 0, 1))
		decide1(t, s, rh(A, 10, 0, 1), rh(A, 5, 0, 0))
		adm := int64(1)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if ok, err := s.Decide(ctx, []rls.Hit{rh(A, 5, 0, 1), rh(E, 1, 0, 1)}, make([]rls.Result, 2)); ok || err != nil {
					t.Error(ok, err)
				}
			})
		}
		wg.Wait()
		for {
			ok, _ := decide1(t, s, rh(A, 10, 0, 1))
			if !ok {
				break
			}
			adm++
		}
		worst = max(worst, adm)
		if adm > 10 {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of 200 rounds admitted more than 10 tokens of a burst of 10 that never refills (worst %d)", bad, worst)
	}
}

// TestSplitErrorGivesBack: on a Cluster, a request whose one key errs
// (a hash where a bucket should be: WRONGTYPE) while its other key, on
// another master, admitted fails with a plain error, and the admitted
// key's take is given back exactly once: it reads full again.
func TestSplitErrorGivesBack(t *testing.T) {
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

// TestCancelledSplit (passes): on a Cluster, requests of A (burst 10) and B
// (burst 4, on another master), neither refilling, from 4 goroutines,
// each with a context that ends after 0 to 3 ms or is cancelled at a
// random moment, so that it ends while keys are being decided or between
// the decision and the give-back. A request reported admitted must hold
// both takes, and no take may be given back twice: admitted plus what each
// key holds afterwards stays within its burst.
func TestCancelledSplit(t *testing.T) {
	t.Parallel() // real time: sleeps, on stores of its own
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
