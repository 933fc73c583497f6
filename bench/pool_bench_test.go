package bench

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/jackc/puddle/v2"

	"github.com/admit-go/admit/bench/pool"
	"github.com/admit-go/admit/chanpool"
)

// BenchmarkPool measures one Acquire followed by one Release, the unit of
// work of every pool user:
//
//	BenchmarkPool/case=<uncontended|g8cap1|g8cap4|g8cap64>/impl=<chanpool|puddle|semslice>
//
// uncontended is one goroutine on a pool of capacity 4 (it only ever uses
// one resource); g8capN is 8 goroutines on a pool of capacity N, whatever
// -cpu says: RunParallel with SetParallelism(ceil(8/GOMAXPROCS)). Each impl
// is called through its own API, wrapped in one closure call that every impl
// pays alike. Resources are created during the first iterations and then
// reused, so allocs/op is the pools' own. No pool has validation or expiry
// configured. `benchstat -col /impl` gives one column per pool.
func BenchmarkPool(b *testing.B) {
	cases := []struct {
		name       string
		capacity   int
		goroutines int // 0: the benchmark goroutine alone
	}{
		{"uncontended", 4, 0},
		{"g8cap1", 1, 8},
		{"g8cap4", 4, 8},
		{"g8cap64", 64, 8},
	}
	for _, c := range cases {
		b.Run("case="+c.name, func(b *testing.B) {
			for _, im := range poolImpls {
				b.Run("impl="+im.name, func(b *testing.B) {
					pair, closePool := im.open(b, c.capacity)
					defer closePool()
					ctx := context.Background()
					b.ReportAllocs()
					if c.goroutines == 0 {
						for b.Loop() {
							if err := pair(ctx); err != nil {
								b.Fatal(err)
							}
						}
						return
					}
					procs := runtime.GOMAXPROCS(0)
					b.SetParallelism((c.goroutines + procs - 1) / procs)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := pair(ctx); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		})
	}
}

// poolConn stands in for a pooled connection.
type poolConn struct{ _ [8]byte }

func newPoolConn(context.Context) (*poolConn, error) { return &poolConn{}, nil }

// poolImpl opens a pool of the given capacity and returns one
// Acquire+Release pair and a function that closes the pool.
type poolImpl struct {
	name string
	open func(tb testing.TB, capacity int) (pair func(context.Context) error, closePool func())
}

// poolImpls is in the fixed order of every table: this module's pool, the
// peer, the teaching baseline.
var poolImpls = []poolImpl{
	{"chanpool", openChanpool},
	{"puddle", openPuddle},
	{"semslice", openSemSlice},
}

func openChanpool(tb testing.TB, capacity int) (func(context.Context) error, func()) {
	p, err := chanpool.New(capacity, newPoolConn)
	if err != nil {
		tb.Fatal(err)
	}
	pair := func(ctx context.Context) error {
		l, err := p.Acquire(ctx)
		if err != nil {
			return err
		}
		l.Release()
		return nil
	}
	return pair, func() {
		if err := p.Close(context.Background()); err != nil {
			tb.Error(err)
		}
	}
}

func openPuddle(tb testing.TB, capacity int) (func(context.Context) error, func()) {
	p, err := puddle.NewPool(&puddle.Config[*poolConn]{
		Constructor: newPoolConn,
		Destructor:  func(*poolConn) {},
		MaxSize:     int32(capacity),
	})
	if err != nil {
		tb.Fatal(err)
	}
	pair := func(ctx context.Context) error {
		r, err := p.Acquire(ctx)
		if err != nil {
			return err
		}
		r.Release()
		return nil
	}
	return pair, p.Close
}

func openSemSlice(_ testing.TB, capacity int) (func(context.Context) error, func()) {
	p := pool.NewSemSlice(capacity, newPoolConn, nil)
	pair := func(ctx context.Context) error {
		c, err := p.Acquire(ctx)
		if err != nil {
			return err
		}
		p.Release(c)
		return nil
	}
	return pair, p.Close
}

// TestPoolImpls checks that every benchmarked pool hands out and takes back
// resources, so that a broken adapter cannot produce a fast benchmark.
func TestPoolImpls(t *testing.T) {
	for _, im := range poolImpls {
		t.Run("impl="+im.name, func(t *testing.T) {
			pair, closePool := im.open(t, 2)
			defer closePool()
			for i := range 10 {
				if err := pair(context.Background()); err != nil {
					t.Fatalf("pair %s: %v", strconv.Itoa(i), err)
				}
			}
		})
	}
}
