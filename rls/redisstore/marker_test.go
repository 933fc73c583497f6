package redisstore_test

// The clamp mark ("0 t sig:c": a bucket full only because a carry clamped
// its balance to a smaller burst) through give-backs, expiry and a script
// from before the mark.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/internal/tick"
	"github.com/redis/go-redis/v9"
)

func decide1(t *testing.T, s rls.Store, hits ...rls.Hit) (bool, []rls.Result) {
	t.Helper()
	res := make([]rls.Result, len(hits))
	a, err := s.Decide(context.Background(), hits, res)
	if err != nil {
		t.Fatal(err)
	}
	return a, res
}

// TestGiveBackDeletesOthersMarker: a split request R1 takes 1 from a
// full key under S (5 an hour) and is refused by another node. Before its
// give-back arrives, other requests leave the key marked under S (full under
// S, 5 under L). R1's give-back (its take was from a full bucket) then
// finds s.all = 0 under the same sig and, taking it for full, deleted the
// mark (a version did): the key read full under L and admitted 10 at once,
// where without R1 at all (the model) it admits 5.
func TestGiveBackDeletesOthersMarker(t *testing.T) {
	s, c, p := singleStoreOf(t)
	ctx := context.Background()
	S := rls.Hit{Key: "gm", Capacity: 5, Count: 1, Period: time.Hour, N: 1}
	L := rls.Hit{Key: "gm", Capacity: 10, Count: 10, Period: time.Second}

	tk := take(t, s, S) // R1's take
	L.N = 0
	decide1(t, s, L)                   // R2: carried into L, 4 of 10, stored under L
	time.Sleep(700 * time.Millisecond) // L refills to full by itself
	L.N = 1
	S0 := S
	S0.N = 0
	decide1(t, s, L, S0) // R3: 9 under L, clamped full under S: marked
	v, _ := c.Get(ctx, p+"gm").Result()
	if !strings.HasSuffix(v, ":c") {
		t.Fatalf("no mark after R3: %q", v)
	}
	if _, err := s.GiveBackForTest(ctx, S, tk); err != nil { // R1's give-back
		t.Fatal(err)
	}
	v, _ = c.Get(ctx, p+"gm").Result()
	L.N = 10
	a, res := decide1(t, s, L)
	t.Logf("after give-back the key is %q; L take 10: admitted %v, remaining %d", v, a, res[0].Remaining)
	if a {
		t.Errorf("a give-back of a take from a full bucket deleted another request's marker: L admitted 10 where the model (R1 never happened) has 5")
	}
}

// TestGiveBackMarksRefilled: a key one token down under S (10 a second)
// takes 5, refill repays all during the round trips, and the give-back,
// finding the key as its decision left it, restores the state a refused
// request leaves, refilled: full, deleted. Marked (a version did, for any
// take from a bucket merely not full),
// under a larger limit (20) it read 10, where the model (a full bucket,
// the refused take undone) reads 20.
func TestGiveBackMarksRefilled(t *testing.T) {
	s, c, p := singleStoreOf(t)
	ctx := context.Background()
	h := rls.Hit{Key: "gr", Capacity: 10, Count: 10, Period: time.Second, N: 1}
	decide1(t, s, h)
	h.N = 5
	tk := take(t, s, h)
	time.Sleep(800 * time.Millisecond) // 8 tokens refilled: all 6 repaid
	giveBack(t, s, h, tk)
	v, _ := c.Get(ctx, p+"gr").Result()
	big := rls.Hit{Key: "gr", Capacity: 20, Count: 10, Period: time.Second}
	_, res := decide1(t, s, big)
	t.Logf("after give-back key=%q; peek under burst 20: %d", v, res[0].Remaining)
	if res[0].Remaining < 20 {
		t.Errorf("a bucket refilled to full by itself, given back, reads %d under burst 20 (want 20): the give-back marked it", res[0].Remaining)
	}
}

// TestMarkerHugePX: a marker of a huge, slow bucket (5·10^7 a year,
// q = 1 s) gets PX = cdiv(capU, m)·q/1000, about 1.6·10^18 ms: above 2^53
// but below LLONG_MAX; Redis must accept it.
func TestMarkerHugePX(t *testing.T) {
	s, c, p := singleStoreOf(t)
	y := 365 * 24 * time.Hour
	L := rls.Hit{Key: "hp", Capacity: 60_000_000, Count: 1, Period: y, N: 1}
	S := rls.Hit{Key: "hp", Capacity: 50_000_000, Count: 1, Period: y}
	decide1(t, s, L, S)
	v, _ := c.Get(context.Background(), p+"hp").Result()
	ttl, _ := c.PTTL(context.Background(), p+"hp").Result()
	t.Logf("marker %q, pttl %v", v, ttl)
	if !strings.HasSuffix(v, ":c") || ttl <= 0 {
		t.Errorf("marker %q pttl %v", v, ttl)
	}
}

// TestOldScriptReadsMark: during a rolling upgrade a replica from before
// the mark (its script at 3fae337, testdata) reads a marked bucket as
// another limit's full bucket, as it read a clamped one before: never as
// more than full (a mark of d = -1, tried first, read as a balance of one
// unit above the burst: 6 admitted through a burst of 5), and without an
// error. So it does a Cluster store's (tracked) keys, whose version and
// points follow the sig: a mark as above, and a bucket with 7 of 10 left
// as 7 of 10.
func TestOldScriptReadsMark(t *testing.T) {
	old, err := os.ReadFile("testdata/script-3fae337.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, track := range []bool{false, true} {
		for _, count := range []int64{0, 1} {
			s, c, p := singleStoreOf(t)
			if track {
				s.TrackForTest()
			}
			key := fmt.Sprintf("old%d", count)
			L := rls.Hit{Key: key, Capacity: 10, Count: count, Period: time.Hour, N: 1}
			S := rls.Hit{Key: key, Capacity: 5, Count: count, Period: time.Hour}
			decide1(t, s, L, S) // 9 under L, marked under S
			if v, _ := c.Get(context.Background(), p+key).Result(); !strings.HasSuffix(v, ":c") {
				t.Fatalf("track %v, count %d: no mark: %q", track, count, v)
			}
			S.N = 6 // the Go side passes at most capacity+1
			if a := runOld(t, c, string(old), p, S); a {
				t.Errorf("track %v, count %d: a script from before the mark admitted 6 through a burst of 5", track, count)
			}
			S.N = 0
			S.Debt = true
			runOld(t, c, string(old), p, S) // a debt hit of 0: no error
			L.Key, L.N = key+"d", 3
			decide1(t, s, L)
			if L.N = 8; runOld(t, c, string(old), p, L) {
				t.Errorf("track %v, count %d: a script from before the mark admitted 8 of the 7 left", track, count)
			}
			if L.N = 7; !runOld(t, c, string(old), p, L) {
				t.Errorf("track %v, count %d: a script from before the mark refused 7 of the 7 left", track, count)
			}
		}
	}
}

// runOld runs src, a script from before the mark, on hits through any
// client (one key, one slot, on a Cluster), and reports whether it
// admitted them.
func runOld(t *testing.T, c redis.Scripter, src, prefix string, hits ...rls.Hit) bool {
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

// TestRaisedLimitAfterUpgrade (passes: the run's key expires when
// refilled, so the raise finds it absent): a key in debt written by the script
// from before the mark (a replica before a rolling upgrade) is read by
// this one as a run begun at a mark (the cautious reading), and its run
// bit is never cleared while requests keep the key busy: burst 10 at 10 a
// second, 1 taken every 150 ms for 1.5 s, then full again (300 ms idle).
// The rule is then raised to 100 an hour, burst 100: a full bucket stays
// full (docs/rls.md), and memory admits 100; the tracked store carries the
// refilled run as a mark, 10 of 100, 90 short for most of an hour.
func TestRaisedLimitAfterUpgrade(t *testing.T) {
	old, err := os.ReadFile("testdata/script-3fae337.lua")
	if err != nil {
		t.Fatal(err)
	}
	stores := memoryAndTracked(t)
	got := map[string]int{}
	for _, x := range stores {
		L := rls.Hit{Key: "rlu", Capacity: 10, Count: 10, Period: time.Second, N: 1}
		if x.c != nil {
			if !runOld(t, x.c, string(old), x.pfx, L) {
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
