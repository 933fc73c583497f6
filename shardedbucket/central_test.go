package shardedbucket

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// words returns every word a call could write: each shard's z, then c,
// debtUntil and epoch.
func words(b *Bucket) []int64 {
	var w []int64
	for i := range b.shards {
		w = append(w, b.shards[i].z.Load())
	}
	return append(w, b.c.Load(), b.debtUntil.Load(), b.epoch.Load())
}

// changed returns the indexes (as in words) of the words that differ.
func changed(before, after []int64) []int {
	var idx []int
	for i := range before {
		if before[i] != after[i] {
			idx = append(idx, i)
		}
	}
	return idx
}

// TestCollapseAndSpread walks a bucket of 4 shards through its two
// representations on a fake clock: the first gather to find it dry
// collapses it into the central word; while it is central, a rejection
// writes no word at all and an admission writes c alone (the dry path's one
// shared line); the refill that leaves spreadAt after an admission deals the
// balance back to the shards, exactly; and every step keeps the balance.
func TestCollapseAndSpread(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(64, 1e3, WithShards(4), admit.WithClock(clk))
	require.NoError(t, err)
	require.Equal(t, int64(spread), b.c.Load(), "a new bucket is spread")
	require.Equal(t, b.p.Units(32), b.spreadAt, "half the capacity (below 16 tokens a shard)")
	require.True(t, b.TryAcquireN(64))
	clk.Advance(500 * time.Microsecond) // half a token, in one shard
	assert.False(t, b.TryAcquire(), "half a token")
	require.NotEqual(t, int64(spread), b.c.Load(), "the dry gather collapsed the bucket")
	for i := range b.shards {
		require.Equal(t, int64(frozen), b.shards[i].z.Load(), "shard %d frozen", i)
	}
	assert.InDelta(t, 0.5, b.Tokens(), 1e-9, "the collapse kept the half token")

	cIdx := len(b.shards)
	for k := range 200 {
		clk.Advance(100 * time.Microsecond) // a tenth of a token
		before := words(b)
		ok := b.takeAt(b.p.Units(1), b.p.V(clk.Now()), uint(k))
		after := words(b)
		if ok {
			assert.Equal(t, []int{cIdx}, changed(before, after), "step %d: an admission writes c alone", k)
		} else {
			assert.Empty(t, changed(before, after), "step %d: a rejection writes nothing", k)
		}
	}
	assert.InDelta(t, 0.5, b.Tokens(), 1e-9, "twenty tokens admitted, one every ten steps")

	// 40 ms: 40 tokens more. The admission leaves 39.5 >= 32: it spreads.
	clk.Advance(40 * time.Millisecond)
	require.True(t, b.TryAcquire())
	require.Equal(t, int64(spread), b.c.Load(), "spread again")
	v := b.p.V(clk.Now())
	var sum int64
	for i := range b.shards {
		bal, _, _ := b.shards[i].state(v, &b.g)
		require.GreaterOrEqual(t, bal, int64(0), "shard %d", i)
		require.LessOrEqual(t, bal, b.shards[i].cap, "shard %d", i)
		sum += bal
	}
	assert.Equal(t, b.p.Units(79)/2, sum, "39.5 tokens dealt, none lost")
	assert.True(t, b.TryAcquireN(39))
	assert.False(t, b.TryAcquire(), "half a token left")
	clk.Advance(time.Second)
	assert.Equal(t, 64.0, b.Tokens(), "full after a second")
}

// TestSpreadThreshold checks the hysteresis: at least two tokens (or the
// whole capacity) and at most half the capacity, 16 tokens a shard between.
func TestSpreadThreshold(t *testing.T) {
	const one = 1 << 10
	for _, tc := range []struct {
		capacity int64
		shards   int
		want     int64
	}{{2, 2, 2}, {3, 2, 2}, {4, 4, 2}, {100, 2, 32}, {100, 8, 50}, {1e6, 16, 256}, {1, 1, 1}, {1e6, 1, 16}} {
		assert.Equal(t, tc.want*one, spreadThreshold(tc.capacity*one, one, tc.shards), "%+v", tc)
	}
}

// TestCollapseAtTheLatestReading stages, inside a collapse, a concurrent
// caller whose clock reading is later than the collapsing caller's: after
// the collapse has frozen shard 0, it takes shard 1's 4 tokens at 100 s.
// The collapse must sum the shards at a reading taken after the last
// freeze: summed at the collapsing caller's own reading (0.5 s), shard 1's
// take at 100 s would count as refill spent in advance, and the central
// word would hand out the 4 tokens shard 0 holds and 4 more: 12 tokens at
// 100 s from a bucket of capacity 8.
func TestCollapseAtTheLatestReading(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(8, 1, WithShards(2), admit.WithClock(clk))
	require.NoError(t, err)
	adm := []buckettest.Admission{{At: 0, N: 8}}
	require.True(t, b.TryAcquireN(8))
	clk.Advance(500 * time.Millisecond)
	testHookStep = func(b *Bucket, i int) {
		if i != 0 || b.c.Load() != spread {
			return
		}
		testHookStep = nil
		clk.Set(int64(100 * time.Second))
		require.True(t, b.takeAt(b.p.Units(4), b.p.V(clk.Now()), 1), "shard 1 is full at 100 s")
		adm = append(adm, buckettest.Admission{At: clk.Now(), N: 4})
	}
	defer func() { testHookStep = nil }()
	assert.False(t, b.takeAt(b.p.Units(1), b.p.V(int64(500*time.Millisecond)), 0), "half a token at 0.5 s")
	require.Nil(t, testHookStep, "the collapse ran the staged take")
	require.NotEqual(t, int64(spread), b.c.Load())
	got := int64(0)
	for b.TryAcquire() {
		adm = append(adm, buckettest.Admission{At: clk.Now(), N: 1})
		got++
	}
	assert.NoError(t, buckettest.CheckAdmissions(8, 1, adm))
	assert.Equal(t, int64(4), got, "shard 0's 4 tokens, after shard 1's")
}

// TestReserveCollapses checks that a blocked AcquireN reserves on the
// central word: the bucket collapses, the waiter wakes exactly when one
// bucket's would, no TryAcquire overtakes it, and cancelling it gives the
// units back while it is the newest.
func TestReserveCollapses(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(16, 4, WithShards(4), admit.WithClock(clk))
	require.NoError(t, err)
	require.True(t, b.TryAcquireN(12)) // 4 tokens left, spread over the shards
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.AcquireN(ctx, 6) }() // 2 short: 0.5 s at 4/s
	require.NoError(t, clk.WaitForSleepers(context.Background(), 1))
	require.NotEqual(t, int64(spread), b.c.Load(), "the reservation collapsed the bucket")
	wake, ok := clk.NextWake()
	require.True(t, ok)
	assert.Equal(t, int64(500*time.Millisecond), wake, "the waiter wakes when one bucket's would")
	assert.InDelta(t, -2.0, b.Tokens(), 1e-9)
	clk.Advance(499 * time.Millisecond)
	assert.False(t, b.TryAcquire(), "no TryAcquire overtakes the waiter")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	assert.InDelta(t, 4+0.499*4, b.Tokens(), 1e-9, "the newest reservation's units came back")
	assert.True(t, b.TryAcquireN(5))
}

// loseCentralTo stages, once, a concurrent caller from home other that
// takes one token from the central word just before the next central
// admission's CompareAndSwap, at the same reading: the call loses the word,
// as it would to another core. It reports, through the returned function,
// whether the staged take ran and admitted.
func loseCentralTo(t *testing.T, other uint) func() bool {
	t.Helper()
	ran := false
	testHookCentral = func(b *Bucket, v int64, start uint) {
		testHookCentral = nil
		ran = b.takeAt(b.p.Units(1), v, other)
	}
	t.Cleanup(func() { testHookCentral = nil })
	return func() bool { return ran }
}

// TestStandAside walks two homes of a dry bucket through standing aside on
// explicit fake-clock steps (central.go): at 4e6/s a stand lasts a
// microsecond, 4 tokens of refill. A home that loses the central word to
// the other and is left with less than a token refuses without reading c
// until the stand ends, while the other home still admits and the tokens
// stay in the bucket; after the stand it decides exactly again; a home
// that has lost once stands aside again when it finds c moved by the other
// home, and gives a turn to a home aside once its run has taken asideRun
// tokens; a refusal
// that leaves a token or more never stands aside, and a collapse clears the
// record.
func TestStandAside(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	b, err := New(100, 4e6, WithShards(2), admit.WithClock(clk))
	require.NoError(t, err)
	b.asideUnits = spanOf(&b.p) // as New sets it where homes are processors (not under admit_purego)
	require.Equal(t, b.p.Units(4), b.asideUnits, "a microsecond at 4e6/s")
	home0, home1 := &b.shards[0], &b.shards[1]
	take := func(home uint, n int64) bool { return b.takeAt(b.p.Units(n), b.p.V(clk.Now()), home) }
	// A stand's end from stream value v: odd if it follows a lost race
	// (a turn is owed to it), even if it gives a turn.
	owed := func(v int64) int64 { return (v+b.asideUnits)&^1 | 1 }
	given := func(v int64) int64 { return (v + b.asideUnits) &^ 1 }
	tokens := func() float64 { return b.Tokens() }

	require.True(t, b.TryAcquireN(100))
	clk.Advance(100 * time.Nanosecond) // 0.4 token
	require.False(t, take(0, 1))
	require.NotEqual(t, int64(spread), b.c.Load(), "the dry gather collapsed the bucket")

	// 250 ns: one token. Home 1 takes it just before home 0's CAS.
	clk.Set(250)
	took := loseCentralTo(t, 1)
	assert.False(t, take(0, 1), "home 0 lost the only token")
	require.True(t, took(), "the staged take from home 1 admitted")
	v := b.p.V(clk.Now())
	assert.Equal(t, owed(v), home0.aside.Load(), "home 0 stands aside for 4 tokens of refill, owed a turn")
	assert.Equal(t, v+asideRecord*b.asideUnits, home0.lostUntil.Load(), "and counts c's moves as lost races for 64 stands")
	assert.Zero(t, home1.aside.Load(), "home 1 won: it does not")

	for _, step := range []struct {
		at     int64 // ns
		home   uint
		n      int64
		want   bool
		tokens float64 // in the bucket after the call
	}{
		{at: 500, home: 0, n: 1, want: false, tokens: 1},  // aside: a token there, refused
		{at: 1000, home: 0, n: 1, want: false, tokens: 3}, // still aside until 1250 ns and a unit
		{at: 1000, home: 1, n: 2, want: true, tokens: 1},  // the other home admits
		{at: 1250, home: 0, n: 1, want: false, tokens: 2}, // the stand's last unit: owed a turn, it ends a unit late
		{at: 1252, home: 0, n: 2, want: true, tokens: 0},  // exact again (a unit is 2 ns here): both tokens
	} {
		clk.Set(step.at)
		assert.Equal(t, step.want, take(step.home, step.n), "home %d takes %d at %d ns", step.home, step.n, step.at)
		assert.InDelta(t, step.tokens, tokens(), 1e-2, "at %d ns", step.at) // 1/128-token units
	}

	// Home 0 has lost in this dry spell: when home 1 moves c and home 0
	// then finds less than a token, it stands aside again. Home 1, which
	// never lost, refuses exactly and stays as it is.
	clk.Set(1500) // one token
	require.True(t, take(1, 1))
	assert.False(t, take(0, 1))
	assert.Equal(t, owed(b.p.V(1500)), home0.aside.Load(), "home 0 found c moved by home 1")
	assert.False(t, take(1, 1))
	assert.Zero(t, home1.aside.Load(), "home 1 has lost no race")

	// A refusal that leaves a token or more does not stand aside, even
	// after c moved.
	clk.Set(3000) // 6 tokens
	require.True(t, take(1, 3))
	assert.False(t, take(0, 5), "3 tokens, 5 asked")
	assert.Equal(t, owed(b.p.V(1500)), home0.aside.Load(), "unchanged: the bucket was not dry")

	// Turns: home 1 loses the last token to home 0 and keeps finding c
	// moved by it, so it stands aside again each time its stand ends;
	// once home 0's run has taken asideRun tokens, the admission that
	// leaves less than a token finds home 1 aside, and home 0 stands aside
	// itself: home 1's turn.
	clk.Set(4000) // 7 tokens
	require.True(t, take(0, 6))
	assert.Equal(t, b.c.Load(), home0.seen.Load(), "a home that has lost keeps its record current")
	took = loseCentralTo(t, 0)
	assert.False(t, take(1, 1), "home 0 took the last token first")
	require.True(t, took())
	require.Equal(t, owed(b.p.V(4000)), home1.aside.Load(), "home 1 stands aside")
	home0.runFrom.Store(b.c.Load() - b.p.Units(1)) // home 0's run: the token it just took
	restands := 0
	for k := int64(1); k < asideRun; k++ {
		clk.Set(4000 + 250*k) // a token each, home 0 takes it as it comes
		require.True(t, take(0, 1), "home 0's token %d of the run", k+1)
		if k < asideRun-1 {
			require.Less(t, home0.aside.Load(), b.p.V(clk.Now()), "home 0's token %d of the run: no turn", k+1)
		}
		clk.Set(4000 + 250*k + 125) // home 1 comes half a token later
		before := home1.aside.Load()
		require.False(t, take(1, 1), "home 1 at %d ns", clk.Now())
		if home1.aside.Load() != before {
			restands++
		}
	}
	assert.Equal(t, 3, restands, "home 1 stood aside again each time its stand ended")
	assert.Equal(t, given(b.p.V(7750)), home0.aside.Load(), "home 0's 16th token gives home 1 a turn")
	assert.Equal(t, b.c.Load(), home0.runFrom.Load(), "a new run begins")
	clk.Set(8700) // home 1's stand is over, home 0's not
	assert.False(t, take(0, 1), "home 0 is aside, tokens there")
	assert.True(t, take(1, 1), "home 1 takes its turn")

	// The edges of a turn, set up directly: the admission that completes
	// a run of asideRun tokens but leaves a token gives no turn, the next
	// that leaves less does; and with nobody aside, home 0's record is
	// cleared instead.
	clk.Set(20_000)
	require.True(t, take(1, int64(tokens())-3))                // 3 tokens and a fraction left (below spreadAt: no spread)
	home1.aside.Store(owed(b.p.V(clk.Now()) + b.p.Units(100))) // home 1 aside, owed a turn, for a long while
	from := b.c.Load() - b.asideRun + b.p.Units(1)
	home0.runFrom.Store(from)
	require.True(t, take(0, 1))
	assert.Less(t, home0.aside.Load(), b.p.V(clk.Now()), "the run is complete but left tokens: no turn")
	assert.Equal(t, from, home0.runFrom.Load())
	require.True(t, take(0, 2))
	assert.Equal(t, given(b.p.V(clk.Now())), home0.aside.Load(), "the next, leaving none, gives the turn")
	// Home 1 aside to give a turn is owed none: home 0 gives it none, and
	// clears its record instead. (Turns given to turns chained, long after
	// any race was lost.)
	clk.Advance(2 * time.Microsecond) // 8 tokens and the fraction; home 0's stand is over
	home0.lostUntil.Store(b.p.V(clk.Now()) + b.p.Units(1000))
	home1.aside.Store(given(b.p.V(clk.Now()) + b.p.Units(100)))
	home0.runFrom.Store(b.c.Load() - b.asideRun)
	require.True(t, take(0, 8))
	require.Less(t, tokens(), 1.0)
	assert.Less(t, home0.aside.Load(), b.p.V(clk.Now()), "home 1 gave a turn: none owed to it")
	assert.Zero(t, home0.lostUntil.Load(), "home 0's record cleared")
	home1.aside.Store(0)              // nobody aside now
	clk.Advance(2 * time.Microsecond) // 8 tokens and the fraction; home 0's stand is over
	home0.runFrom.Store(b.c.Load() - b.asideRun)
	require.True(t, take(0, 8))
	require.Less(t, tokens(), 1.0)
	assert.Less(t, home0.aside.Load(), b.p.V(clk.Now()), "nobody to give a turn to")
	assert.Equal(t, []int64{0, b.c.Load()}, []int64{home0.lostUntil.Load(), home0.runFrom.Load()}, "home 0's record of losing is cleared, a new run begins")

	// A stand holds only while the shards are frozen: a home aside when
	// the bucket spreads takes from its own shard at once.
	home0.aside.Store(b.p.V(clk.Now()) + b.p.Units(1000))
	clk.Advance(20 * time.Microsecond) // 80 tokens: an admission leaves more than spreadAt
	require.True(t, take(1, 1))
	require.Equal(t, int64(spread), b.c.Load(), "spread")
	assert.True(t, take(0, 1), "home 0's shard holds tokens; its stand is for the central word only")

	// Spread and collapse again: the record of lost races is cleared.
	clk.Set(int64(time.Millisecond))
	require.True(t, take(0, 1))
	require.Equal(t, int64(spread), b.c.Load(), "spread again")
	require.True(t, b.TryAcquireN(99))
	clk.Advance(100 * time.Nanosecond)
	require.False(t, take(0, 1))
	require.NotEqual(t, int64(spread), b.c.Load(), "collapsed again")
	assert.Equal(t, []int64{b.c.Load(), b.c.Load()}, []int64{home0.runFrom.Load(), home1.runFrom.Load()}, "every home's run begins at the collapse")
	clk.Advance(250 * time.Nanosecond)
	require.True(t, take(1, 1))
	clk.Advance(100 * time.Nanosecond)
	assert.False(t, take(0, 1))
	assert.Equal(t, []int64{0, 0}, []int64{home0.lostUntil.Load(), home1.lostUntil.Load()}, "no home has lost since the collapse")
	assert.Zero(t, home0.aside.Load(), "the collapse ended the stand")
}

// TestLoneCallerNeverStandsAside: one caller asking at every half token of
// a bucket, from a random home each time (a goroutine that migrates between
// processors), through many dry spells: while the bucket is dry, every
// call decides exactly as the central word does, and no home ever stands
// aside: only a concurrent call can make a home lose the central word.
func TestLoneCallerNeverStandsAside(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	clk := buckettest.NewFakeClock(0)
	b, err := New(8, 4e6, WithShards(4), admit.WithClock(clk))
	require.NoError(t, err)
	b.asideUnits = spanOf(&b.p) // as New sets it where homes are processors
	require.True(t, b.TryAcquireN(8))
	var central, spells int
	for range 100_000 {
		clk.Advance(125 * time.Nanosecond) // half a token
		if r.IntN(200) == 0 {
			clk.Advance(time.Duration(r.IntN(4000))) // an idle gap, up to 16 tokens: some spread the bucket
		}
		start := uint(r.IntN(64))
		need, v := b.p.Units(1), b.p.V(clk.Now())
		want, dry := dryDecision(b, need, v, start)
		wasSpread := b.c.Load() == spread
		ok := b.takeAt(need, v, start)
		if dry {
			central++
			require.Equal(t, want, ok, "a dry call at %d decides as the central word", clk.Now())
		}
		if wasSpread && b.c.Load() != spread {
			spells++
		}
		for i := range b.shards {
			require.Zero(t, b.shards[i].aside.Load(), "shard %d stood aside", i)
		}
	}
	assert.Greater(t, spells, 100, "the bucket collapsed many times")
	assert.Greater(t, central, 50_000, "most calls found the bucket dry")
}

// TestCallerLeftAlone: two homes of a dry bucket lose the central word to
// calls from two others, which then stop; one caller alone asks at every
// half token, either on one processor (home 0, an AcquireN of its own every
// tenth call, some of them cancelled) or alternating between the two homes (a goroutine that migrates on every call, the worst case: each
// home finds c moved by the other). Every call decides exactly as the
// central word does, or is refused by a stand; on one processor it stands
// aside at most twice, and migrating, not after the homes' records of
// losing have run out (asideRecord stands after the last lost race).
func TestCallerLeftAlone(t *testing.T) {
	for _, migrating := range []bool{false, true} {
		t.Run(fmt.Sprintf("migrating=%v", migrating), func(t *testing.T) {
			clk := buckettest.NewFakeClock(0)
			b, err := New(100, 4e6, WithShards(4), admit.WithClock(clk))
			require.NoError(t, err)
			b.asideUnits = spanOf(&b.p)
			take := func(home uint) bool { return b.takeAt(b.p.Units(1), b.p.V(clk.Now()), home) }
			require.True(t, b.TryAcquireN(100))
			clk.Advance(100 * time.Nanosecond)
			require.False(t, take(0))
			require.NotEqual(t, int64(spread), b.c.Load(), "collapsed")
			clk.Set(250)
			took := loseCentralTo(t, 2) // homes 2 and 3 are the other cores, gone after this
			require.False(t, take(0))
			require.True(t, took())
			clk.Set(500)
			took = loseCentralTo(t, 3)
			require.False(t, take(1))
			require.True(t, took())
			expiry := max(b.shards[0].lostUntil.Load(), b.shards[1].lostUntil.Load())
			require.Positive(t, expiry, "both homes have lost")

			stands, last := 0, int64(0)
			for k := range 20_000 {
				clk.Advance(125 * time.Nanosecond)
				home := uint(0)
				if migrating {
					home = uint(k % 2)
				}
				h := &b.shards[home]
				v := b.p.V(clk.Now())
				want, dry := dryDecision(b, b.p.Units(1), v, home)
				before := h.aside.Load()
				ok := take(home)
				if dry {
					require.Equal(t, want, ok, "call %d decides as the central word, or as its stand", k)
				}
				if h.aside.Load() != before {
					stands++
					last = v
				}
				if !migrating && k%10 == 9 {
					// Its own AcquireN now and then: a reservation, or a
					// take, that moves c from home 0 too; every third
					// waiting one is cancelled.
					if wait, _, undo := b.reserveAt(b.p.Units(1), math.MaxInt64, 0); undo != nil && k%30 == 29 {
						require.Positive(t, wait)
						require.True(t, undo())
					}
				}
			}
			t.Logf("%d stands, the last at stream value %d; records ran out at %d", stands, last, expiry)
			if migrating {
				assert.Positive(t, stands, "the homes stood aside while their records held")
				assert.Less(t, last, expiry, "no stand after the records ran out")
			} else {
				assert.LessOrEqual(t, stands, 2)
			}
		})
	}
}

// TestAsideSpan: New has homes stand aside for a microsecond of refill, at
// most 8 tokens and at most the capacity less a token, where homes are
// processors, and never under admit_purego (homes are random shards there).
func TestAsideSpan(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
		tokens   int64
	}{
		{100, 4e6, 4}, // a microsecond of refill
		{100, 1e9, 8}, // at most 8 tokens
		{2, 1e9, 1},   // at most the capacity less a token
		{1, 1e9, 0},
		{100, 0, 0},
	} {
		b, err := New(tc.capacity, tc.rate, WithShards(1))
		require.NoError(t, err)
		want := b.p.Units(tc.tokens)
		if !homeIsProcessor {
			want = 0
		}
		assert.Equal(t, want, b.asideUnits, "%+v", tc)
	}
}
