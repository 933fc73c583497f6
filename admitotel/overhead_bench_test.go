package admitotel_test

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/mutexbucket"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// block is how many calls of one kind run between two clock readings.
const block = 16

// pair is one op's timing: a block of bare calls and a block of wrapped
// calls, run back to back.
type pair struct{ bare, wrapped int64 }

// overheadCase builds, for one of RunParallel's goroutines, a bare call and
// the same call through the wrapper, on the same limiter state.
type overheadCase struct {
	name  string
	setup func(b *testing.B, mp metric.MeterProvider, id int) (bare, wrapped func() bool)
}

// BenchmarkOverhead measures what the wrapper adds to a decision. One op is
// a block of bare calls and a block of wrapped calls on the same limiter,
// each timed, the order swapped every op, so that both see the machine at
// the same moment. On a machine shared with other work a descheduled block
// can be thousands of times slower than the rest, so the metrics are
// medians over the ops: bare-ns/call and wrapped-ns/call, and
// overhead-ns/call, the median of each op's difference. allocs/op covers both
// kinds of call (TestZeroAllocs checks the wrapped ones alone). The clock
// readings between blocks add about a nanosecond per call to both alike.
//
// case=control runs the bare call in both blocks: its overhead is the
// measurement's own error. case=forward wraps keyed in a type that only
// forwards AllowN: its overhead is what any wrapper costs, before counting
// (passing the Decision, six fields, through one more call).
//
// The instruments are registered on an SDK MeterProvider with a
// ManualReader, as in production; nothing collects during the run (a
// collection runs in the reader's goroutine, off the hot path).
func BenchmarkOverhead(b *testing.B) {
	ctx := context.Background()
	keyedCase := func(capacity int64, rate float64, want bool, wrapped string) func(*testing.B, metric.MeterProvider, int) (func() bool, func() bool) {
		var l *keyed.Limiter
		var w *admitotel.Limiter
		return func(b *testing.B, mp metric.MeterProvider, id int) (func() bool, func() bool) {
			if l == nil { // one limiter for every goroutine, a key each
				var err error
				if l, err = keyed.New(capacity, rate); err != nil {
					b.Fatal(err)
				}
				if w, err = admitotel.Wrap(l, admitotel.WithMeterProvider(mp)); err != nil {
					b.Fatal(err)
				}
			}
			var bl, wl admit.KeyedLimiter = l, w
			switch wrapped {
			case "control":
				wl = l
			case "forward":
				wl = &forward{l}
			}
			key := "client-" + strconv.Itoa(id)
			bl.AllowN(ctx, key, 1) // insert (and for the deny case drain) the key
			return func() bool { d, _ := bl.AllowN(ctx, key, 1); return d.Allowed == want },
				func() bool { d, _ := wl.AllowN(ctx, key, 1); return d.Allowed == want }
		}
	}
	cases := []overheadCase{
		{"limiter=keyed/case=admit", keyedCase(1e9, 1e9, true, "")},
		{"limiter=keyed/case=deny", keyedCase(1, 1e-6, false, "")},
		{"limiter=keyed/case=control", keyedCase(1e9, 1e9, true, "control")},
		{"limiter=keyed/case=forward", keyedCase(1e9, 1e9, true, "forward")},
		{"limiter=mutexbucket/case=admit", func(b *testing.B, mp metric.MeterProvider, _ int) (func() bool, func() bool) {
			// A bucket per goroutine: contention on one bucket's
			// mutex is not what this measures.
			l, err := mutexbucket.New(1e9, 1e9)
			if err != nil {
				b.Fatal(err)
			}
			w, err := admitotel.WrapLimiter(l, admitotel.WithMeterProvider(mp))
			if err != nil {
				b.Fatal(err)
			}
			var bl, wl admit.Limiter = l, w
			return bl.TryAcquire, wl.TryAcquire
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			n := runtime.GOMAXPROCS(0) // RunParallel's goroutines
			calls := make([][2]func() bool, n)
			samples := make([][]pair, n)
			for i := range n {
				calls[i][0], calls[i][1] = c.setup(b, mp, i)
				samples[i] = make([]pair, 0, b.N)
			}
			var ids, wrong atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				id := ids.Add(1) - 1
				bare, wrapped := calls[id][0], calls[id][1]
				s := samples[id]
				bad := 0
				for pb.Next() {
					first, second := bare, wrapped
					if len(s)&1 == 1 {
						first, second = wrapped, bare
					}
					t0 := time.Now()
					for range block {
						if !first() {
							bad++
						}
					}
					t1 := time.Now()
					for range block {
						if !second() {
							bad++
						}
					}
					t2 := time.Now()
					p := pair{int64(t1.Sub(t0)), int64(t2.Sub(t1))}
					if len(s)&1 == 1 {
						p.bare, p.wrapped = p.wrapped, p.bare
					}
					s = append(s, p)
				}
				samples[id] = s
				wrong.Add(int64(bad))
			})
			b.StopTimer()
			if n := wrong.Load(); n > 0 {
				b.Fatalf("%d calls did not decide as the case expects", n)
			}
			var bare, wrapped, diff []int64
			for _, s := range samples {
				for _, p := range s {
					bare, wrapped, diff = append(bare, p.bare), append(wrapped, p.wrapped), append(diff, p.wrapped-p.bare)
				}
			}
			if len(diff) > 0 {
				b.ReportMetric(median(bare)/block, "bare-ns/call")
				b.ReportMetric(median(wrapped)/block, "wrapped-ns/call")
				b.ReportMetric(median(diff)/block, "overhead-ns/call")
			}
		})
	}
}

func median(v []int64) float64 {
	slices.Sort(v)
	if len(v)%2 == 1 {
		return float64(v[len(v)/2])
	}
	return float64(v[len(v)/2-1]+v[len(v)/2]) / 2
}

// forward is the least a wrapper can do: pass the call on.
type forward struct{ l admit.KeyedLimiter }

func (f *forward) AllowN(ctx context.Context, key string, n int64) (admit.Decision, error) {
	return f.l.AllowN(ctx, key, n)
}
