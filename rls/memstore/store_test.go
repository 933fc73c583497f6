package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
	"github.com/admit-go/admit/rls/storetest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

// lim is a bucket: capacity, and count per period.
type lim struct {
	capacity, count int64
	period          time.Duration
}

func (l lim) hit(key string, n int64) rls.Hit {
	return rls.Hit{Key: key, Capacity: l.capacity, Count: l.count, Period: l.period, N: n}
}

func (l lim) rate() float64 { return float64(l.count) / l.period.Seconds() }

// peek returns each key's whole tokens, checked with N = 0 at the clock's
// current instant.
func peek(t *testing.T, s *memstore.Store, keys []string, lims map[string]lim) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, k := range keys {
		res := make([]rls.Result, 1)
		ok, err := s.Decide(ctx, []rls.Hit{lims[k].hit(k, 0)}, res)
		require.NoError(t, err)
		require.True(t, ok, "a peek is always admitted")
		out[k] = res[0].Remaining
	}
	return out
}

// model drives a Store from bytes on a fake clock. Before every request it
// peeks every key at the same instant and predicts the outcome from whole
// tokens alone: admitted exactly when every enforced hit's key holds its N
// (a request's hits are distinct keys here); afterwards an admitted request
// has taken N from each hit that held it, a refused one from none. Every
// admission is also recorded per key in a buckettest.Bound, which checks
// capacity + rate × T + 1 over every window.
func model(t *testing.T, data []byte) {
	clk := buckettest.NewFakeClock(0)
	s := memstore.New(memstore.WithClock(clk))
	keys := []string{"a", "b", "c", "d"}
	lims := map[string]lim{
		"a": {3, 1, time.Second},
		"b": {5, 1, 2 * time.Second},
		"c": {1, 1, 3 * time.Second},
		"d": {10, 7, time.Second},
	}
	bounds := map[string]*buckettest.Bound{}
	for k, l := range lims {
		bounds[k] = buckettest.NewBound(l.capacity, l.rate())
	}
	for len(data) >= 3 {
		op, mask, nb := data[0], data[1], data[2]
		data = data[3:]
		clk.Advance(time.Duration(op) * 37 * time.Millisecond)
		var hits []rls.Hit
		for i, k := range keys {
			if mask&(1<<i) == 0 {
				continue
			}
			n := int64(nb>>(2*i)) & 3
			if k == "d" {
				n *= 4
			}
			h := lims[k].hit(k, n)
			h.Shadow = mask&(0x10<<i) != 0
			hits = append(hits, h)
		}
		if len(hits) == 0 {
			continue
		}
		before := peek(t, s, keys, lims)
		want := true
		for _, h := range hits {
			if !h.Shadow && before[h.Key] < h.N {
				want = false
			}
		}
		res := make([]rls.Result, len(hits))
		got, err := s.Decide(ctx, hits, res)
		require.NoError(t, err)
		require.Equal(t, want, got, "hits %+v before %v", hits, before)
		after := peek(t, s, keys, lims)
		taken := map[string]int64{}
		for i, h := range hits {
			require.Equal(t, before[h.Key] >= h.N, res[i].OK, "hit %+v before %v", h, before)
			if got && res[i].OK {
				taken[h.Key] = h.N
				require.True(t, bounds[h.Key].Admit(clk.Now(), h.N), "key %s over capacity + rate × T + 1", h.Key)
			}
			require.Equal(t, after[h.Key], res[i].Remaining, "reported remaining of %s", h.Key)
		}
		for _, k := range keys {
			require.Equal(t, before[k]-taken[k], after[k], "key %s: before %v after %v hits %+v admitted %v", k, before, after, hits, got)
		}
	}
}

// noise returns n pseudo-random bytes (xorshift32 from seed), the
// deterministic input of a model test.
func noise(seed uint32, n int) []byte {
	data := make([]byte, n)
	x := seed
	for i := range data {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		data[i] = byte(x)
	}
	return data
}

func TestModel(t *testing.T) { model(t, noise(1, 3*4000)) }

func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 0x0f, 0xff, 0, 0x0f, 0xff, 30, 0x03, 0x05})
	f.Add([]byte{1, 0x13, 0x3f, 1, 0x13, 0x3f, 1, 0x13, 0x3f, 255, 0xff, 0})
	f.Fuzz(model)
}

// TestRefusedTakesNothing is the all-or-nothing case by hand: a request
// whose second descriptor is empty leaves the first untouched, and the
// caller then sees the first's full balance.
func TestRefusedTakesNothing(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	s := memstore.New(memstore.WithClock(clk))
	a := lim{10, 1, time.Second}.hit("a", 1)
	b := lim{2, 1, time.Second}.hit("b", 1)
	res := make([]rls.Result, 2)
	for range 2 {
		ok, err := s.Decide(ctx, []rls.Hit{a, b}, res)
		require.NoError(t, err)
		require.True(t, ok)
	}
	ok, err := s.Decide(ctx, []rls.Hit{a, b}, res)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, []rls.Result{{OK: true, Remaining: 8, ResetAfter: 2 * time.Second}, {OK: false, Remaining: 0, ResetAfter: 2 * time.Second}}, res)
	// Two hits on one key need both costs.
	b2 := lim{3, 1, time.Second}.hit("c", 2)
	ok, err = s.Decide(ctx, []rls.Hit{b2, b2}, res)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, int64(3), res[0].Remaining)
}

// A Clock that holds a nil pointer (var c *FakeClock; WithClock(c)) is the
// system clock, as a nil Clock is: it panicked in New, which read it.
func TestTypedNilClock(t *testing.T) {
	var clk *buckettest.FakeClock
	s := memstore.New(memstore.WithClock(clk))
	res := make([]rls.Result, 1)
	ok, err := s.Decide(ctx, []rls.Hit{lim{2, 1, time.Second}.hit("a", 1)}, res)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(1), res[0].Remaining)
}

// TestChangedLimit carries a balance over to a new limit, clamped.
func TestChangedLimit(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	s := memstore.New(memstore.WithClock(clk))
	res := make([]rls.Result, 1)
	_, err := s.Decide(ctx, []rls.Hit{lim{10, 1, time.Second}.hit("k", 4)}, res)
	require.NoError(t, err)
	require.Equal(t, int64(6), res[0].Remaining)
	_, err = s.Decide(ctx, []rls.Hit{lim{5, 1, time.Second}.hit("k", 1)}, res)
	require.NoError(t, err)
	require.Equal(t, int64(4), res[0].Remaining, "6 clamped to 5, then 1 taken")
	_, err = s.Decide(ctx, []rls.Hit{lim{100, 1, time.Second}.hit("k", 0)}, res)
	require.NoError(t, err)
	require.Equal(t, int64(4), res[0].Remaining, "a larger capacity adds nothing at once")
	require.Equal(t, 96*time.Second, res[0].ResetAfter)
	// A balance that a smaller capacity clamps to full reads full under it,
	// but is not a full bucket: dropped as one, it read as full under any
	// later, larger capacity (as for a key never seen), and a client
	// alternating two limits on one key refilled it at will. It is kept,
	// marked, and carries its balance, 2, as any other.
	_, err = s.Decide(ctx, []rls.Hit{lim{2, 1, time.Second}.hit("k", 0)}, res)
	require.NoError(t, err)
	require.Equal(t, int64(2), res[0].Remaining, "4 clamped to 2: full")
	require.Equal(t, 1, s.Len())
	_, err = s.Decide(ctx, []rls.Hit{lim{100, 1, time.Second}.hit("k", 0)}, res)
	require.NoError(t, err)
	require.Equal(t, int64(2), res[0].Remaining, "the 2 the clamp left, not a full 100")
	// Full by its own refill, it is a full bucket: dropped, and a larger
	// capacity starts full.
	clk.Advance(98 * time.Second)
	_, err = s.Decide(ctx, []rls.Hit{lim{100, 1, time.Second}.hit("k", 0)}, res)
	require.NoError(t, err)
	require.Equal(t, int64(100), res[0].Remaining)
	require.Equal(t, 0, s.Len())
}

// TestMaxKeys sprays keys past the bound: the store stays within it and
// counts the live buckets it had to evict.
func TestMaxKeys(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	s := memstore.New(memstore.WithClock(clk), memstore.WithMaxKeys(128))
	res := make([]rls.Result, 1)
	for i := range 5000 {
		_, err := s.Decide(ctx, []rls.Hit{lim{5, 1, time.Second}.hit(fmt.Sprint("k", i), 1)}, res)
		require.NoError(t, err)
	}
	require.LessOrEqual(t, s.Len(), 128)
	require.Greater(t, s.Evictions(), int64(0))
	clk.Advance(10 * time.Second)
	evicted := s.Evictions()
	for i := range 5000 {
		_, err := s.Decide(ctx, []rls.Hit{lim{5, 1, time.Second}.hit(fmt.Sprint("n", i), 1)}, res)
		require.NoError(t, err)
		clk.Advance(time.Second)
	}
	require.Equal(t, evicted, s.Evictions(), "buckets full again are dropped, not evicted")
}

// TestMaxKeysWholeRequests sends requests of rls.MaxLimited new keys each:
// a request's own buckets are never evicted for its other descriptors, so
// a shard whose share is smaller than a request's buckets in it holds them
// while the request is decided, and is brought back under its share by
// its next new key. Below 64 × MaxLimited the store holds at most the
// bound plus one request's buckets (it held twice the bound and stayed
// there before); from 64 × MaxLimited on, at most the bound.
func TestMaxKeysWholeRequests(t *testing.T) {
	for _, maxKeys := range []int{256, 64 * rls.MaxLimited} {
		s := memstore.New(memstore.WithClock(buckettest.NewFakeClock(0)), memstore.WithMaxKeys(maxKeys))
		hits := make([]rls.Hit, rls.MaxLimited)
		res := make([]rls.Result, rls.MaxLimited)
		most := 0
		for r := range max(20, 3*maxKeys/rls.MaxLimited) {
			for i := range hits {
				hits[i] = lim{100, 100, time.Hour}.hit(fmt.Sprintf("r%d-%d", r, i), 1)
			}
			_, err := s.Decide(ctx, hits, res)
			require.NoError(t, err)
			most = max(most, s.Len())
		}
		bound := maxKeys
		if maxKeys < 64*rls.MaxLimited {
			bound += rls.MaxLimited
		}
		require.LessOrEqual(t, most, bound, "MaxKeys %d", maxKeys)
		require.Greater(t, s.Evictions(), int64(0))
		// Single new keys, enough to reach every shard: back within the
		// bound.
		for i := range 64 * 16 {
			_, err := s.Decide(ctx, hits[:1:1], res)
			require.NoError(t, err)
			hits[0] = lim{100, 100, time.Hour}.hit(fmt.Sprint("one-", i), 1)
		}
		require.LessOrEqual(t, s.Len(), maxKeys, "MaxKeys %d, after single keys", maxKeys)
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) rls.Store { return memstore.New() })
}
