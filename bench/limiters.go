package bench

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	jujuratelimit "github.com/juju/ratelimit"
	uberratelimit "go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/admit-go/admit/casbucket"
	"github.com/admit-go/admit/gcra"
	"github.com/admit-go/admit/mutexbucket"
	admitrate "github.com/admit-go/admit/rate"
	"github.com/admit-go/admit/shardedbucket"
)

// Limiter is the surface every benchmark, test and the storm call. Each
// implementation is wrapped in a small adapter that satisfies it, so that all
// of them pay the same interface dispatch and differ only in what happens
// behind it.
type Limiter interface {
	// TryAcquire takes one token now or reports false.
	TryAcquire() bool
	// TryAcquireN takes n tokens now or reports false. It is all-or-nothing
	// only where Impl.ExactN says so.
	TryAcquireN(n int64) bool
	// Acquire blocks until one token is taken. Implementations whose
	// blocking call takes no context ignore ctx (Impl.Context says so).
	Acquire(ctx context.Context) error
}

// Impl describes one implementation in the comparison.
type Impl struct {
	// Name is the value of the impl= key in benchmark names and the label
	// in tables and plots.
	Name string
	// New returns a limiter that starts with capacity tokens and refills at
	// rate tokens per second.
	New func(capacity int64, rate float64) (Limiter, error)
	// Try reports whether TryAcquire and TryAcquireN are real non-blocking
	// calls. It is false for go.uber.org/ratelimit, whose Take always
	// blocks until its turn: comparing it with calls that reject would
	// compare different things, so it appears only where callers wait.
	Try bool
	// ExactN reports whether TryAcquireN is all-or-nothing. juju's
	// TakeAvailable(n) takes whatever is there, up to n; see jujuLimiter.
	ExactN bool
	// Context reports whether Acquire honours ctx.
	Context bool
	// Peer is true for the libraries this module is compared against.
	Peer bool
	// Floor is true for the reference measurements (see Floors), which are
	// not limiters at all: they admit every call.
	Floor bool
}

// Impls lists the implementations in the order every table and plot uses:
// this module's four buckets and its x/time/rate drop-in, then the peers.
var Impls = []Impl{
	{Name: "mutexbucket", New: newMutexbucket, Try: true, ExactN: true, Context: true},
	{Name: "casbucket", New: newCasbucket, Try: true, ExactN: true, Context: true},
	{Name: "shardedbucket", New: newShardedbucket, Try: true, ExactN: true, Context: true},
	{Name: "gcra", New: newGcra, Try: true, ExactN: true, Context: true},
	{Name: "rate", New: newRate, Try: true, ExactN: true, Context: true},
	{Name: "xrate", New: newXrate, Try: true, ExactN: true, Context: true, Peer: true},
	{Name: "juju", New: newJuju, Try: true, ExactN: false, Context: false, Peer: true},
	{Name: "uber", New: newUber, Try: false, ExactN: false, Context: false, Peer: true},
}

// Floors are what a limiter call cannot be cheaper than on this machine,
// measured in the same run through the same Limiter interface so that the
// dispatch cost is included. They ignore capacity and rate and admit every
// call.
//
//   - floor-since: one time.Since on a fixed origin, the clock read each of
//     this module's buckets makes per call.
//   - floor-atomicadd: one atomic add on a counter every goroutine shares:
//     what any single-word design pays once goroutines contend.
//   - floor-paddedadd: one atomic add on a counter padded to its own cache
//     lines, one per goroutine: the best a sharded design can hope for.
var Floors = []Impl{
	{Name: "floor-since", New: newFloorSince, Try: true, ExactN: true, Context: true, Floor: true},
	{Name: "floor-atomicadd", New: newFloorAtomicAdd, Try: true, ExactN: true, Context: true, Floor: true},
	{Name: "floor-paddedadd", New: newFloorPaddedAdd, Try: true, ExactN: true, Context: true, Floor: true},
}

// Lookup returns the implementation or floor with the given name.
func Lookup(name string) (Impl, bool) {
	for _, list := range [][]Impl{Impls, Floors} {
		for _, im := range list {
			if im.Name == name {
				return im, true
			}
		}
	}
	return Impl{}, false
}

// Localizer is implemented by limiters that want one handle per goroutine.
// A parallel benchmark calls Local once in each of its goroutines and uses
// the result in that goroutine only. Only floor-paddedadd needs it.
type Localizer interface {
	Local() Limiter
}

// This module's buckets already satisfy Limiter; the constructors only
// adapt the return type.

func newMutexbucket(capacity int64, r float64) (Limiter, error) {
	b, err := mutexbucket.New(capacity, r)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func newCasbucket(capacity int64, r float64) (Limiter, error) {
	b, err := casbucket.New(capacity, r)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func newShardedbucket(capacity int64, r float64) (Limiter, error) {
	// The default shard count follows GOMAXPROCS at construction, which is
	// why benchmarks build their bucket inside each -cpu setting.
	b, err := shardedbucket.New(capacity, r)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func newGcra(capacity int64, r float64) (Limiter, error) {
	b, err := gcra.New(capacity, r)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// rateLimiter adapts this module's rate package exactly as xrateLimiter
// adapts golang.org/x/time/rate, so that the two differ only behind the
// calls: Allow, AllowN(time.Now(), n) and Wait.
type rateLimiter struct{ l *admitrate.Limiter }

func newRate(capacity int64, r float64) (Limiter, error) {
	if capacity < 1 || capacity > math.MaxInt32 || !(r >= 0) || math.IsInf(r, 0) {
		return nil, fmt.Errorf("rate: capacity %d, rate %v not supported", capacity, r)
	}
	return rateLimiter{admitrate.NewLimiter(admitrate.Limit(r), int(capacity))}, nil
}

func (x rateLimiter) TryAcquire() bool { return x.l.Allow() }
func (x rateLimiter) TryAcquireN(n int64) bool {
	if n < 0 || n > math.MaxInt32 {
		return false
	}
	return x.l.AllowN(time.Now(), int(n))
}
func (x rateLimiter) Acquire(ctx context.Context) error { return x.l.Wait(ctx) }

// xrateLimiter adapts golang.org/x/time/rate: burst is the capacity and
// Allow, AllowN and Wait are the calls. Allow reads time.Now before taking
// the limiter's mutex; that ordering is what the storm probes.
type xrateLimiter struct{ l *rate.Limiter }

func newXrate(capacity int64, r float64) (Limiter, error) {
	if capacity < 1 || capacity > math.MaxInt32 || !(r >= 0) || math.IsInf(r, 0) {
		return nil, fmt.Errorf("xrate: capacity %d, rate %v not supported", capacity, r)
	}
	return xrateLimiter{rate.NewLimiter(rate.Limit(r), int(capacity))}, nil
}

func (x xrateLimiter) TryAcquire() bool { return x.l.Allow() }
func (x xrateLimiter) TryAcquireN(n int64) bool {
	if n < 0 || n > math.MaxInt32 {
		return false
	}
	return x.l.AllowN(time.Now(), int(n))
}
func (x xrateLimiter) Acquire(ctx context.Context) error { return x.l.Wait(ctx) }

// jujuLimiter adapts github.com/juju/ratelimit: NewBucketWithRate(rate,
// capacity), TakeAvailable for the non-blocking calls and Wait for the
// blocking one.
//
// TakeAvailable(n) takes min(n, available) and returns how many it took, so
// TryAcquireN(n) is reported true only when all n were taken, but a false
// result may still have consumed a part. There is no way to put tokens back.
// The n=8 benchmark uses a bucket that never empties, where every call takes
// all 8 and the partial path never runs; the registry test shows the partial
// take so that no one mistakes this adapter for an all-or-nothing one.
//
// NewBucketWithRate approximates the rate to within 1% (it picks a whole
// number of tokens per whole-nanosecond tick), and Wait takes no context.
type jujuLimiter struct{ b *jujuratelimit.Bucket }

func newJuju(capacity int64, r float64) (Limiter, error) {
	if capacity < 1 || !(r > 0) || math.IsInf(r, 0) {
		// NewBucketWithRate panics rather than returning an error.
		return nil, fmt.Errorf("juju: capacity %d, rate %v not supported", capacity, r)
	}
	return jujuLimiter{jujuratelimit.NewBucketWithRate(r, capacity)}, nil
}

func (j jujuLimiter) TryAcquire() bool { return j.b.TakeAvailable(1) == 1 }
func (j jujuLimiter) TryAcquireN(n int64) bool {
	if n <= 0 {
		return n == 0
	}
	return j.b.TakeAvailable(n) == n
}
func (j jujuLimiter) Acquire(context.Context) error {
	j.b.Wait(1)
	return nil
}

// uberLimiter adapts go.uber.org/ratelimit. Take blocks until the caller's
// slot in an evenly spaced schedule, so there is no non-blocking call:
// TryAcquire and TryAcquireN panic, and Impl.Try is false. Acquire ignores
// ctx, as Take does.
//
// The rate becomes one request per (1s / rate), rounded down to a whole
// nanosecond; capacity − 1 becomes the slack, the number of unspent slots
// a caller may catch up on after idling, which is the closest analogue of a
// bucket's burst. Unlike a bucket it does not start full.
type uberLimiter struct{ l uberratelimit.Limiter }

func newUber(capacity int64, r float64) (Limiter, error) {
	if capacity < 1 || capacity-1 > math.MaxInt32 || !(r > 0) || r > 1e9 {
		return nil, fmt.Errorf("uber: capacity %d, rate %v not supported", capacity, r)
	}
	per := time.Duration(float64(time.Second) / r)
	if per < 1 {
		return nil, fmt.Errorf("uber: rate %v rounds to a zero interval", r)
	}
	opts := []uberratelimit.Option{uberratelimit.Per(per)}
	if capacity == 1 {
		opts = append(opts, uberratelimit.WithoutSlack)
	} else {
		opts = append(opts, uberratelimit.WithSlack(int(capacity-1)))
	}
	return uberLimiter{uberratelimit.New(1, opts...)}, nil
}

func (uberLimiter) TryAcquire() bool       { panic("uber: Take blocks; there is no non-blocking call") }
func (uberLimiter) TryAcquireN(int64) bool { panic("uber: Take blocks; there is no non-blocking call") }
func (u uberLimiter) Acquire(context.Context) error {
	u.l.Take()
	return nil
}

// Floors.

// sinceOrigin mirrors the core module's system clock: time.Since on a Time
// with a monotonic reading reads only the monotonic clock.
var sinceOrigin = time.Now()

type floorSince struct{}

func newFloorSince(int64, float64) (Limiter, error) { return floorSince{}, nil }

// The comparisons with an impossible value keep the reads live without
// adding a branch anyone takes.
func (floorSince) TryAcquire() bool         { return time.Since(sinceOrigin) != -1 }
func (floorSince) TryAcquireN(n int64) bool { return time.Since(sinceOrigin) != -1 }
func (floorSince) Acquire(context.Context) error {
	if time.Since(sinceOrigin) == -1 {
		return context.Canceled
	}
	return nil
}

// padded is one counter alone in 128 bytes: two cache lines, because
// adjacent-line prefetch on x86 makes neighbours on the next line contend
// too.
type padded struct {
	_ [64]byte
	n atomic.Int64
	_ [56]byte
}

type floorAtomicAdd struct{ c *padded }

func newFloorAtomicAdd(int64, float64) (Limiter, error) { return floorAtomicAdd{new(padded)}, nil }

func (f floorAtomicAdd) TryAcquire() bool              { return f.c.n.Add(1) != 0 }
func (f floorAtomicAdd) TryAcquireN(n int64) bool      { return f.c.n.Add(n) != 0 || n == 0 }
func (f floorAtomicAdd) Acquire(context.Context) error { f.c.n.Add(1); return nil }

// floorPaddedAdd hands each goroutine its own padded counter through Local;
// the benchmarks always go through Local, serially too. Used directly, it
// adds to slot 0.
type floorPaddedAdd struct {
	slots []padded
	next  *atomic.Int64
}

// paddedSlots bounds the goroutines that get a counter of their own; later
// ones share, round robin. RunParallel starts GOMAXPROCS goroutines.
const paddedSlots = 256

func newFloorPaddedAdd(int64, float64) (Limiter, error) {
	return floorPaddedAdd{slots: make([]padded, paddedSlots), next: new(atomic.Int64)}, nil
}

func (f floorPaddedAdd) Local() Limiter {
	i := (f.next.Add(1) - 1) % paddedSlots
	return floorAtomicAdd{&f.slots[i]}
}

func (f floorPaddedAdd) TryAcquire() bool              { return f.slots[0].n.Add(1) != 0 }
func (f floorPaddedAdd) TryAcquireN(n int64) bool      { return f.slots[0].n.Add(n) != 0 || n == 0 }
func (f floorPaddedAdd) Acquire(context.Context) error { f.slots[0].n.Add(1); return nil }
