package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	tollbooth "github.com/didip/tollbooth/v7"
	tblimiter "github.com/didip/tollbooth/v7/limiter"
	"github.com/go-chi/httprate"
	golimiter "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/admit-go/admit/keyed"
)

// KeyedLimiter is the surface the keyed benchmarks and the keyed storm call:
// one token from key's bucket, now, or false. Every implementation is
// wrapped in a small adapter so that all pay the same interface dispatch.
type KeyedLimiter interface {
	Allow(key string) bool
}

// KeyedImpl describes one per-key limiter in the comparison.
type KeyedImpl struct {
	// Name is the value of the impl= key in benchmark names and tables.
	Name string
	// New returns a limiter in which each key starts with capacity tokens
	// and refills at rate tokens per second, holding up to maxKeys keys
	// where the implementation has such a bound. The io.Closer, if not
	// nil, stops the implementation's background goroutine.
	New func(capacity int64, rate float64, maxKeys int) (KeyedLimiter, io.Closer, error)
	// Exact reports whether each key is a token bucket that never admits
	// more than capacity + rate × T: false for the window counters.
	Exact bool
	// Peer is true for the libraries this module is compared against.
	Peer bool
}

// KeyedImpls lists the per-key limiters in the order every table uses:
// this module's keyed, then the peers.
var KeyedImpls = []KeyedImpl{
	{Name: "keyed", New: newKeyed, Exact: true},
	{Name: "syncmap-xrate", New: newSyncMapXrate, Exact: true, Peer: true},
	{Name: "httprate", New: newHttprate, Exact: false, Peer: true},
	{Name: "golimiter", New: newGoLimiter, Exact: false, Peer: true},
	{Name: "tollbooth", New: newTollbooth, Exact: true, Peer: true},
}

// LookupKeyed returns the per-key limiter with the given name.
func LookupKeyed(name string) (KeyedImpl, bool) {
	for _, im := range KeyedImpls {
		if im.Name == name {
			return im, true
		}
	}
	return KeyedImpl{}, false
}

func newKeyed(capacity int64, r float64, maxKeys int) (KeyedLimiter, io.Closer, error) {
	l, err := keyed.New(capacity, r, keyed.WithMaxKeys(maxKeys))
	if err != nil {
		return nil, nil, err
	}
	return l, nil, nil
}

// syncMapXrate is the seed's per-client map: a sync.Map from key to an
// x/time/rate limiter, created with LoadOrStore on first sight and never
// removed (the usual hand-written per-client limiter).
type syncMapXrate struct {
	m        sync.Map
	capacity int
	r        rate.Limit
}

func newSyncMapXrate(capacity int64, r float64, _ int) (KeyedLimiter, io.Closer, error) {
	if capacity < 1 || capacity > math.MaxInt32 || !(r >= 0) || math.IsInf(r, 0) {
		return nil, nil, fmt.Errorf("syncmap-xrate: capacity %d, rate %v not supported", capacity, r)
	}
	return &syncMapXrate{capacity: int(capacity), r: rate.Limit(r)}, nil, nil
}

func (s *syncMapXrate) Allow(key string) bool {
	if v, ok := s.m.Load(key); ok {
		return v.(*rate.Limiter).Allow()
	}
	v, _ := s.m.LoadOrStore(key, rate.NewLimiter(s.r, s.capacity))
	return v.(*rate.Limiter).Allow()
}

// httprateLimiter drives go-chi/httprate's in-memory counter
// (NewLocalLimitCounter) the way its RateLimiter.OnLimit does, without the
// HTTP response: a sliding-window estimate, previous window weighted by the
// part of it still inside the window plus the current one, compared with
// the limit under one mutex, then an increment. The window is
// capacity / rate long and the limit is capacity requests, the closest
// window to a bucket of that capacity and rate. It approximates: over a
// window it can admit up to about twice the limit at a window boundary, and
// it is not a token bucket.
type httprateLimiter struct {
	mu      sync.Mutex
	counter httprate.LimitCounter
	limit   int
	window  time.Duration
	origin  time.Time
}

func newHttprate(capacity int64, r float64, _ int) (KeyedLimiter, io.Closer, error) {
	if capacity < 1 || capacity > math.MaxInt32 || !(r > 0) || math.IsInf(r, 0) {
		return nil, nil, fmt.Errorf("httprate: capacity %d, rate %v not supported", capacity, r)
	}
	window := time.Duration(float64(capacity) / r * 1e9)
	if window <= 0 {
		window = 1
	}
	return &httprateLimiter{counter: httprate.NewLocalLimitCounter(window), limit: int(capacity), window: window, origin: time.Now().UTC()}, nil, nil
}

func (h *httprateLimiter) Allow(key string) bool {
	now := time.Now().UTC()
	// Windows aligned to the limiter's creation, as httprate aligns its own.
	cur := h.origin.Add(now.Sub(h.origin).Truncate(h.window))
	prev := cur.Add(-h.window)
	h.mu.Lock()
	defer h.mu.Unlock()
	c, p, err := h.counter.Get(key, cur, prev)
	if err != nil {
		return false
	}
	est := float64(p)*float64(h.window-now.Sub(cur))/float64(h.window) + float64(c)
	if int(math.Round(est))+1 > h.limit {
		return false
	}
	return h.counter.IncrementBy(key, cur, 1) == nil
}

// goLimiter adapts sethvargo/go-limiter's memorystore: capacity tokens per
// interval of capacity / rate, refilled in whole ticks, swept by a
// background goroutine (the io.Closer stops it).
type goLimiter struct{ s golimiter.Store }

func newGoLimiter(capacity int64, r float64, _ int) (KeyedLimiter, io.Closer, error) {
	if capacity < 1 || !(r > 0) || math.IsInf(r, 0) {
		return nil, nil, fmt.Errorf("golimiter: capacity %d, rate %v not supported", capacity, r)
	}
	interval := time.Duration(float64(capacity) / r * 1e9)
	s, err := memorystore.New(&memorystore.Config{Tokens: uint64(capacity), Interval: interval})
	if err != nil {
		return nil, nil, err
	}
	g := goLimiter{s}
	return g, g, nil
}

func (g goLimiter) Allow(key string) bool {
	_, _, _, ok, err := g.s.Take(context.Background(), key)
	return ok && err == nil
}

func (g goLimiter) Close() error { return g.s.Close(context.Background()) }

// tollboothLimiter adapts tollbooth v7: one x/time/rate limiter per key in
// an expirable cache under one mutex, default TTL (10 years).
type tollboothLimiter struct{ l *tblimiter.Limiter }

func newTollbooth(capacity int64, r float64, _ int) (KeyedLimiter, io.Closer, error) {
	if capacity < 1 || capacity > math.MaxInt32 || !(r > 0) || math.IsInf(r, 0) {
		return nil, nil, fmt.Errorf("tollbooth: capacity %d, rate %v not supported", capacity, r)
	}
	l := tollbooth.NewLimiter(r, nil).SetBurst(int(capacity))
	return tollboothLimiter{l}, nil, nil
}

func (t tollboothLimiter) Allow(key string) bool { return !t.l.LimitReached(key) }

// KeyName is the keyed benchmarks' i-th key: "key-" and i in 12 digits, 16
// bytes, so that a limiter's copy of one is exactly one 16-byte buffer.
func KeyName(i int) string { return fmt.Sprintf("key-%012d", i) }

// Walk makes count calls on l, one per key of keys in turn from index i,
// goroutine g forwards when g is even and backwards when it is odd, and
// returns how many were admitted and the index the next call would use.
//
// The directions alternate because two goroutines walking one order fall
// into step, whatever their offsets: one runs a little faster until it
// catches the other, and then it stays behind it, as each call then waits
// for the line of a key the other has just written (a traffic jam;
// cmd/walkgap, which walks with it, logs the two goroutines' distance and
// shows it). Walking in opposite directions they cross twice a turn and part
// at once, so every key is still written by every core, but not by both at
// one instant, which clients that are not pinned to cores do not do either.
func Walk(l KeyedLimiter, keys []string, g, i, count int) (admitted int64, next int) {
	if g%2 == 0 {
		for range count {
			if l.Allow(keys[i]) {
				admitted++
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
		return admitted, i
	}
	for range count {
		if l.Allow(keys[i]) {
			admitted++
		}
		if i--; i < 0 {
			i = len(keys) - 1
		}
	}
	return admitted, i
}
