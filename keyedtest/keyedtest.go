// Package keyedtest is the conformance suite every admit.KeyedLimiter in
// this module passes (the in-process keyed package and the Redis-backed
// redisbucket module), exported so that other implementations can run it
// too.
//
// It has two entry points:
//
//   - Run: cases on the real clock only (a new key's burst, Decision
//     invariants, n edge cases, keys independent, RetryAfter and ResetAfter
//     honoured by really waiting, per-key bounds under storms of
//     goroutines). They never pass a clock option, so a limiter that reads
//     a server's clock (Redis TIME) runs them unchanged.
//   - RunFakeClock: cases that step a buckettest.FakeClock explicitly and
//     expect exact decisions to the nanosecond (refill tables, exact
//     RetryAfter and ResetAfter, a backward clock, a 100-year idle span,
//     fractional rates, a zero rate, and every window of a random walk). The
//     factory receives admit.WithClock(clock) and must honour it; a
//     limiter whose clock is not in the process cannot run these.
//
// A package calls them from one test each:
//
//	func TestConformance(t *testing.T) {
//		keyedtest.Run(t, factory)
//		keyedtest.RunFakeClock(t, factory)
//	}
//
// Real-clock cases assert only what no scheduling can excuse: never more
// than capacity + rate × elapsed (+1) admitted per key, and on a rate so
// slow (1e-3 tokens/s) that no token can refill during the test, exactly the
// capacity. They never assert a duration.
package keyedtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit"
)

// Factory returns a new limiter in which every key holds a bucket of
// capacity tokens refilling at refillPerSecond tokens per second, configured
// by opts, or the constructor's error (the suite checks that invalid
// configurations wrap admit.ErrInvalidConfig).
//
// The suite passes opts only from RunFakeClock, and only admit.WithClock;
// the factory passes them on to its constructor. Every call must return a
// limiter that shares no key with any other the factory returned (a
// Redis-backed factory uses a fresh key prefix per call), because subtests
// use the same key names and run in parallel. The factory may use t to
// register cleanups (t.Cleanup) and to fail the test for a broken
// environment; it must not skip.
type Factory func(t *testing.T, capacity int64, refillPerSecond float64, opts ...admit.Option) (admit.KeyedLimiter, error)

// Never is what the suite accepts for a wait that will never end (a zero
// rate): at least 100 years. keyed reports the largest time.Duration.
const Never = time.Duration(hundred)

// slow is a rate at which no token refills during a test: 1e-3 tokens/s is
// one token per 1000 s.
const slow = 1e-3

// Time spans used in the tables.
const (
	second  = int64(time.Second)
	hundred = 36525 * 24 * 3600 * second // 100 Julian years
)

// Run runs the real-clock cases against factory.
func Run(t *testing.T, factory Factory) {
	s := suite{make: factory}
	t.Run("InvalidConfig", s.invalidConfig)
	t.Run("Burst", s.burst)
	t.Run("AllOrNothing", s.allOrNothing)
	t.Run("Peek", s.peek)
	t.Run("NEdges", s.nEdges)
	t.Run("KeysIndependent", s.keysIndependent)
	t.Run("RetryAfterHonoured", s.retryAfterHonoured)
	t.Run("ResetAfterHonoured", s.resetAfterHonoured)
	t.Run("ManyKeysConcurrent", s.manyKeysConcurrent)
	t.Run("Storm", s.storm)
}

type suite struct {
	make Factory
}

// limiter returns a new limiter or fails t.
func (s suite) limiter(t *testing.T, capacity int64, rate float64, opts ...admit.Option) admit.KeyedLimiter {
	t.Helper()
	l, err := s.make(t, capacity, rate, opts...)
	require.NoError(t, err, "factory(%d, %v)", capacity, rate)
	require.NotNil(t, l)
	return l
}

// allow calls AllowN and fails t on an error.
func allow(t *testing.T, l admit.KeyedLimiter, key string, n int64) admit.Decision {
	t.Helper()
	d, err := l.AllowN(context.Background(), key, n)
	require.NoError(t, err, "AllowN(%q, %d)", key, n)
	return d
}

// CheckDecision fails t if d breaks an invariant every Decision of a
// limiter of the given capacity keeps: Limit is the capacity; Remaining is
// in [0, capacity]; an allowed decision has RetryAfter 0, a denied one a
// positive RetryAfter; ResetAfter is never negative, and is 0 when
// Remaining is the capacity only if nothing is owed (a full bucket). It is
// exported for implementations' own tests.
func CheckDecision(t *testing.T, capacity int64, d admit.Decision, msgAndArgs ...any) {
	t.Helper()
	assert.Equal(t, capacity, d.Limit, append([]any{"Limit"}, msgAndArgs...)...)
	assert.True(t, d.Remaining >= 0 && d.Remaining <= capacity, "Remaining %d outside [0, %d] %v", d.Remaining, capacity, msgAndArgs)
	if d.Allowed {
		assert.Zero(t, d.RetryAfter, "an allowed decision has no RetryAfter %v", msgAndArgs)
	} else {
		assert.Positive(t, d.RetryAfter, "a denied decision has a positive RetryAfter %v", msgAndArgs)
	}
	assert.GreaterOrEqual(t, d.ResetAfter, time.Duration(0), "ResetAfter is never negative %v", msgAndArgs)
	if d.ResetAfter == 0 {
		assert.Equal(t, capacity, d.Remaining, "a bucket with ResetAfter 0 is full %v", msgAndArgs)
	}
}

func (s suite) invalidConfig(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     float64
	}{{0, 1}, {-1, 1}, {math.MinInt64, 1}, {1, -1}, {1, math.NaN()}, {1, math.Inf(1)}, {1, math.Inf(-1)}} {
		_, err := s.make(t, tc.capacity, tc.rate)
		assert.ErrorIs(t, err, admit.ErrInvalidConfig, "factory(%d, %v)", tc.capacity, tc.rate)
	}
	for _, tc := range []struct {
		capacity int64
		rate     float64
	}{{1, 0}, {1, 1e-6}, {1e9, 1e9}, {1, 1e9}, {1e9, 1e-6}, {3, 1.0 / 3}} {
		_, err := s.make(t, tc.capacity, tc.rate)
		assert.NoError(t, err, "factory(%d, %v)", tc.capacity, tc.rate)
	}
}

// burst: a new key holds exactly its capacity, one token at a time, with
// exact Remaining; ResetAfter and RetryAfter lie between the exact wait at
// the slow rate less the time the test took, and that wait plus a second
// (room for a backend that counts time coarsely, never less than the wait).
func (s suite) burst(t *testing.T) {
	for _, c := range []int64{1, 3, 10, 100} {
		t.Run(fmt.Sprintf("capacity=%d", c), func(t *testing.T) {
			t.Parallel()
			l := s.limiter(t, c, slow)
			begin := time.Now()
			for i := range c {
				d := allow(t, l, "k", 1)
				require.True(t, d.Allowed, "token %d of a new key's %d", i+1, c)
				CheckDecision(t, c, d, "token", i+1)
				assert.Equal(t, c-i-1, d.Remaining, "Remaining after token %d", i+1)
				wait := time.Duration(float64(i+1) / slow * 1e9)
				assert.GreaterOrEqual(t, d.ResetAfter, wait-time.Since(begin), "ResetAfter after token %d", i+1)
				assert.LessOrEqual(t, d.ResetAfter, wait+time.Second, "ResetAfter after token %d", i+1)
			}
			d := allow(t, l, "k", 1)
			assert.False(t, d.Allowed, "no token beyond the capacity")
			CheckDecision(t, c, d, "denied")
			assert.Zero(t, d.Remaining)
			wait := time.Duration(1 / slow * 1e9)
			assert.GreaterOrEqual(t, d.RetryAfter, wait-time.Since(begin), "RetryAfter")
			assert.LessOrEqual(t, d.RetryAfter, wait+time.Second, "RetryAfter")
			assert.GreaterOrEqual(t, d.ResetAfter, time.Duration(float64(c)/slow*1e9)-time.Since(begin), "ResetAfter of an empty bucket")
		})
	}
}

func (s suite) allOrNothing(t *testing.T) {
	t.Parallel()
	l := s.limiter(t, 10, slow)
	d := allow(t, l, "k", 7)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(3), d.Remaining)
	d = allow(t, l, "k", 4)
	require.False(t, d.Allowed, "4 of 3 left")
	CheckDecision(t, 10, d)
	assert.Equal(t, int64(3), d.Remaining, "a denial consumes nothing")
	d = allow(t, l, "k", 3)
	require.True(t, d.Allowed, "the 3 left")
	assert.Zero(t, d.Remaining)
	d = allow(t, l, "k", 10)
	assert.False(t, d.Allowed)
	assert.GreaterOrEqual(t, d.RetryAfter, time.Duration(9/slow*1e9), "10 tokens are 10 000 s away, less what refilled")
}

// peek: n == 0 consumes nothing and reports the state.
func (s suite) peek(t *testing.T) {
	t.Parallel()
	l := s.limiter(t, 5, slow)
	for range 10 {
		d := allow(t, l, "k", 0)
		assert.True(t, d.Allowed, "a peek is allowed")
		CheckDecision(t, 5, d, "peek at a new key")
		assert.Equal(t, int64(5), d.Remaining, "a new key is full")
		assert.Zero(t, d.ResetAfter, "a new key is full")
	}
	require.True(t, allow(t, l, "k", 2).Allowed)
	for range 10 {
		d := allow(t, l, "k", 0)
		assert.True(t, d.Allowed)
		CheckDecision(t, 5, d, "peek after 2")
		assert.Equal(t, int64(3), d.Remaining)
		assert.Positive(t, d.ResetAfter)
	}
	require.True(t, allow(t, l, "k", 3).Allowed, "peeks consumed nothing")
	d := allow(t, l, "k", 0)
	assert.True(t, d.Allowed, "a peek at an empty bucket is allowed: it asks for nothing")
	assert.Zero(t, d.Remaining)
	assert.Zero(t, d.RetryAfter)
}

// nEdges: n < 0 and n > capacity are errors wrapping ErrUnsatisfiable with
// Allowed false, and consume nothing.
func (s suite) nEdges(t *testing.T) {
	t.Parallel()
	l := s.limiter(t, 5, slow)
	for _, n := range []int64{-1, math.MinInt64, 6, 1 << 40, math.MaxInt64} {
		d, err := l.AllowN(context.Background(), "k", n)
		assert.ErrorIs(t, err, admit.ErrUnsatisfiable, "AllowN(%d)", n)
		assert.False(t, d.Allowed, "AllowN(%d)", n)
	}
	d := allow(t, l, "k", 5)
	assert.True(t, d.Allowed, "the rejected calls consumed nothing")
	assert.Zero(t, d.Remaining)
	d = allow(t, l, "k", 0)
	assert.True(t, d.Allowed)
	assert.Zero(t, d.Remaining)
}

// Keys are compared as whole strings: the empty key, keys differing only in
// case, a trailing NUL, a separator a backend might use inside its own key
// names, or their last byte of many, are all different, ordinary keys.
var oddKeys = []string{
	"", "a", "A", "a\x00", "\x00", "a:b", "a:", ":b", "{a}", "{a}b", "*", "?", " ", "a b",
	"ключ", "\xff\xfe", "%s", "\n", strings.Repeat("x", 1000), strings.Repeat("x", 999) + "y",
}

func (s suite) keysIndependent(t *testing.T) {
	t.Parallel()
	const c = 3
	l := s.limiter(t, c, slow)
	for i, k := range oddKeys {
		for j := range c {
			d := allow(t, l, k, 1)
			require.True(t, d.Allowed, "key %d (%q), token %d: every key starts full, whatever was drained before", i, k, j+1)
			assert.Equal(t, int64(c-j-1), d.Remaining, "key %d (%q)", i, k)
		}
		require.False(t, allow(t, l, k, 1).Allowed, "key %d (%q) drained", i, k)
	}
	for i, k := range oddKeys {
		d := allow(t, l, k, 0)
		assert.Zero(t, d.Remaining, "key %d (%q) is still drained: no key refilled another", i, k)
	}
}

// retryAfterHonoured: waiting RetryAfter after a denial is enough. A limiter
// whose RetryAfter is earlier than the real wait fails here.
func (s suite) retryAfterHonoured(t *testing.T) {
	t.Parallel()
	const rate = 50 // 20 ms a token
	for _, n := range []int64{1, 2} {
		l := s.limiter(t, 2, rate)
		key := fmt.Sprint("n", n)
		require.True(t, allow(t, l, key, 2).Allowed)
		for i := range 3 {
			d := allow(t, l, key, n)
			if d.Allowed {
				continue // the machine was slow enough for the tokens to come back
			}
			CheckDecision(t, 2, d)
			require.LessOrEqual(t, d.RetryAfter, time.Duration(float64(n)/rate*1e9)+time.Second)
			time.Sleep(d.RetryAfter) // waiting is the test, not a timing assertion
			d = allow(t, l, key, n)
			require.True(t, d.Allowed, "round %d: denied after waiting the RetryAfter it gave", i)
		}
	}
}

// resetAfterHonoured: waiting ResetAfter leaves the bucket full.
func (s suite) resetAfterHonoured(t *testing.T) {
	t.Parallel()
	const c, rate = 3, 100 // 30 ms from empty to full
	l := s.limiter(t, c, rate)
	for i := range 3 {
		d := allow(t, l, "k", int64(1+i%3))
		require.True(t, d.Allowed, "round %d", i)
		require.Positive(t, d.ResetAfter)
		require.LessOrEqual(t, d.ResetAfter, time.Duration(c/rate*1e9)+time.Second)
		time.Sleep(d.ResetAfter)
		d = allow(t, l, "k", 0)
		assert.Equal(t, int64(c), d.Remaining, "round %d: not full after waiting the ResetAfter it gave", i)
		assert.Zero(t, d.ResetAfter, "round %d", i)
	}
}

// manyKeysConcurrent: goroutines interleave over many keys, each asked for
// more than its capacity; at the slow rate every key admits exactly its
// capacity, however the calls interleave.
func (s suite) manyKeysConcurrent(t *testing.T) {
	t.Parallel()
	const c, keys, g = 4, 64, 8
	l := s.limiter(t, c, slow)
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, g)
	for i := range g {
		wg.Go(func() {
			for round := range c + 1 {
				for k := range keys {
					k := (k*7 + i*13 + round) % keys // a different order per goroutine
					d, err := l.AllowN(context.Background(), fmt.Sprint("key-", k), 1)
					if err != nil {
						errs <- err
						return
					}
					if d.Allowed {
						admitted[k].Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for k := range keys {
		assert.Equal(t, int64(c), admitted[k].Load(), "key-%d admitted", k)
	}
}

// storm hammers a few keys from many goroutines on the real clock and checks
// per key: never more than capacity + rate × elapsed + 1 admitted, and, once
// a one-token request has been denied, at least the capacity (a key whose
// requests were charged to another key's bucket fails this).
func (s suite) storm(t *testing.T) {
	if testing.Short() {
		t.Skip("real-clock storm")
	}
	for _, mix := range []struct {
		capacity int64
		rate     float64
	}{{10, 1e3}, {5, 1e4}, {1, 1e5}, {100, 0}} {
		for _, g := range []int{4, 32} {
			t.Run(fmt.Sprintf("capacity=%d/rate=%v/goroutines=%d", mix.capacity, mix.rate, g), func(t *testing.T) {
				t.Parallel()
				l := s.limiter(t, mix.capacity, mix.rate)
				const keys = 4
				// Goroutine i works on key i%keys; odd ones ask for 2
				// tokens (capped at the capacity).
				res, elapsed, err := Storm(l, keys, g, 20*time.Millisecond, func(i int) (string, int64) {
					return fmt.Sprint("storm-", i%keys), min(int64(1+i/keys%2), mix.capacity)
				})
				require.NoError(t, err)
				bound := float64(mix.capacity) + mix.rate*elapsed.Seconds() + 1
				for k, r := range res {
					assert.LessOrEqual(t, float64(r.Admitted), bound, "key %q admitted over %v", k, elapsed)
					if r.DeniedOnes > 0 {
						assert.GreaterOrEqual(t, r.Admitted, mix.capacity, "key %q: a one-token request was denied before the key's burst was spent", k)
					}
				}
			})
		}
	}
}

// StormResult is what Storm counted for one key.
type StormResult struct {
	Admitted   int64 // tokens admitted
	Calls      int64 // AllowN calls
	DeniedOnes int64 // denied calls that asked for one token
}

// Storm runs g goroutines on the real clock; goroutine i calls
// l.AllowN(ctx, req(i)) as fast as it can for about d (req returns the key
// and n, fixed per goroutine). It returns per key what was admitted, and the
// time from before the first goroutine started to after the last ended:
// the span over which capacity + rate × elapsed bounds what any correct
// limiter admits per key. keys is a hint for the map size. The first error
// any call returned stops the storm and is returned.
func Storm(l admit.KeyedLimiter, keys, g int, d time.Duration, req func(i int) (key string, n int64)) (map[string]StormResult, time.Duration, error) {
	var stop atomic.Bool
	var mu sync.Mutex
	res := make(map[string]StormResult, keys)
	var firstErr error
	var wg sync.WaitGroup
	begin := time.Now()
	for i := range g {
		wg.Go(func() {
			key, n := req(i)
			var mine StormResult
			ctx := context.Background()
			for !stop.Load() {
				dec, err := l.AllowN(ctx, key, n)
				mine.Calls++
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					stop.Store(true)
					break
				}
				if dec.Allowed {
					mine.Admitted += n
				} else if n == 1 {
					mine.DeniedOnes++
				}
			}
			mu.Lock()
			r := res[key]
			r.Admitted += mine.Admitted
			r.Calls += mine.Calls
			r.DeniedOnes += mine.DeniedOnes
			res[key] = r
			mu.Unlock()
		})
	}
	time.Sleep(d) // how long to storm, not an assertion
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(begin)
	if firstErr != nil && !errors.Is(firstErr, context.Canceled) {
		return res, elapsed, firstErr
	}
	return res, elapsed, nil
}
