package memstore_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
	"github.com/stretchr/testify/require"
)

// decide1 decides one hit and returns whether it was admitted and its
// result.
func decide1(t *testing.T, s *memstore.Store, h rls.Hit) (bool, rls.Result) {
	t.Helper()
	res := make([]rls.Result, 1)
	ok, err := s.Decide(ctx, []rls.Hit{h}, res)
	require.NoError(t, err)
	return ok, res[0]
}

// TestRaisedWhileRefused: a client drained at 5 a minute keeps asking;
// its rule is raised to 600 a minute. The first request under the new rule
// carries the balance over and is refused (it holds a fraction of a token);
// that refusal must not undo the carry-over, or every later request would
// carry again from the old rule and find a fraction: the client would wait
// for a token at the old rate, 12 s, instead of 0.1 s at the new one.
func TestRaisedWhileRefused(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	s := memstore.New(memstore.WithClock(clk))
	low := lim{5, 5, time.Minute}.hit("c", 1)
	high := lim{600, 600, time.Minute}.hit("c", 1)
	for range 5 {
		ok, _ := decide1(t, s, low)
		require.True(t, ok)
	}
	for range 10 { // 1 s of refusals at the old rate: 1/12 of a token
		clk.Advance(100 * time.Millisecond)
		ok, _ := decide1(t, s, low)
		require.False(t, ok)
	}
	// Under the new rule, the carried 1/12 of a token needs 1/12 × 0.1 s
	// more at 10 a second: refused now, admitted 10 ms later.
	ok, r := decide1(t, s, high)
	require.False(t, ok)
	require.Equal(t, 100*time.Millisecond-time.Second/120, r.ResetAfter-599*100*time.Millisecond, "until full, at the new rate")
	var admittedAt time.Duration
	for step := range 50 {
		clk.Advance(2 * time.Millisecond)
		if ok, _ := decide1(t, s, high); ok {
			admittedAt = time.Duration(step+1) * 2 * time.Millisecond
			break
		}
	}
	require.Equal(t, 92*time.Millisecond, admittedAt, "admitted once the new rate made the carried fraction a token")
}

// TestCarryOver: the balance carries over with its fraction, clamped to the
// new capacity; lowering never gives tokens back, and the request that
// brings the change applies it whatever its outcome.
func TestCarryOver(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	s := memstore.New(memstore.WithClock(clk))
	a := lim{10, 1, time.Second}
	ok, _ := decide1(t, s, a.hit("k", 10))
	require.True(t, ok)
	clk.Advance(2500 * time.Millisecond) // 2.5 tokens
	// Lowered to 2 a second, capacity 4: 2.5 carried, refused for 3.
	ok, r := decide1(t, s, lim{4, 2, time.Second}.hit("k", 3))
	require.False(t, ok)
	require.Equal(t, int64(2), r.Remaining)
	require.Equal(t, 750*time.Millisecond, r.ResetAfter, "1.5 tokens at 2 a second")
	clk.Advance(250 * time.Millisecond) // 3 tokens at the new rate
	ok, _ = decide1(t, s, lim{4, 2, time.Second}.hit("k", 3))
	require.True(t, ok, "the refused request's carry-over stayed")
	// Lowered to capacity 1 with a balance of 0: still 0, not a full 1.
	ok, r = decide1(t, s, lim{1, 1, time.Hour}.hit("k", 0))
	require.True(t, ok)
	require.Equal(t, int64(0), r.Remaining)
	// Raised back: the balance stays what it was, and refills at the new
	// rate.
	ok, r = decide1(t, s, lim{100, 100, time.Second}.hit("k", 1))
	require.False(t, ok)
	require.Equal(t, int64(0), r.Remaining)
	clk.Advance(10 * time.Millisecond)
	ok, _ = decide1(t, s, lim{100, 100, time.Second}.hit("k", 1))
	require.True(t, ok)
}

// TestLargeRates: rules above 1e9 a second (bytes), exact.
func TestLargeRates(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	s := memstore.New(memstore.WithClock(clk))
	l := lim{4000000000, 4000000000, time.Second}
	require.NoError(t, s.Check(l.hit("", 0)))
	ok, r := decide1(t, s, l.hit("b", 4000000000))
	require.True(t, ok)
	require.Equal(t, time.Second, r.ResetAfter)
	clk.Advance(time.Nanosecond)
	ok, r = decide1(t, s, l.hit("b", 5))
	require.False(t, ok)
	require.Equal(t, int64(4), r.Remaining, "4 bytes a nanosecond")
	clk.Advance(time.Nanosecond)
	ok, _ = decide1(t, s, l.hit("b", 8))
	require.True(t, ok)
	// 7 a minute is exact too: the 7th token at exactly 60 s.
	m := lim{7, 7, time.Minute}
	ok, _ = decide1(t, s, m.hit("m", 7))
	require.True(t, ok)
	clk.Advance(time.Minute - time.Nanosecond)
	_, r = decide1(t, s, m.hit("m", 0))
	require.Equal(t, int64(6), r.Remaining)
	clk.Advance(time.Nanosecond)
	_, r = decide1(t, s, m.hit("m", 0))
	require.Equal(t, int64(7), r.Remaining)
}

// heapAfterGC returns the live heap.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestBytesPerBucket: a bucket's memory does not depend on its key's
// length: buckets of 4 KiB keys (a client's large header values) cost at
// most 2 × BucketBytes each below the bound (a table is at least 2/5 full
// once it has grown), plus FixedBytes.
func TestBytesPerBucket(t *testing.T) {
	const n = 20000
	s := memstore.New()
	before := heapAfterGC()
	value := strings.Repeat("v", 4096)
	res := make([]rls.Result, 1)
	for i := range n {
		_, err := s.Decide(ctx, []rls.Hit{lim{5, 1, time.Hour}.hit(fmt.Sprint(i, value), 1)}, res)
		require.NoError(t, err)
	}
	require.Equal(t, n, s.Len())
	grown := heapAfterGC() - before
	t.Logf("%d buckets: %d bytes, %d per bucket", n, grown, grown/n)
	require.LessOrEqual(t, grown, uint64(n*2*memstore.BucketBytes+memstore.FixedBytes))
	runtime.KeepAlive(s)
}

// TestOverridesBounded: every distinct limit a client brings (an
// override) is computed, not kept: the store's memory does not grow with
// them.
func TestOverridesBounded(t *testing.T) {
	const n = 100000
	s := memstore.New()
	before := heapAfterGC()
	res := make([]rls.Result, 1)
	for i := range n {
		// A check (N = 0) holds no bucket; only the limit is new.
		_, err := s.Decide(ctx, []rls.Hit{lim{int64(i + 1), int64(i + 1), time.Hour}.hit("o", 0)}, res)
		require.NoError(t, err)
	}
	require.Equal(t, 0, s.Len())
	grown := int64(heapAfterGC()) - int64(before)
	t.Logf("%d overrides: %d bytes", n, grown)
	require.Less(t, grown, int64(64<<10))
	runtime.KeepAlive(s)
}
