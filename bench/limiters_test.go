package bench

import (
	"context"
	"testing"
	"time"
)

// TestImplsOrder pins the order every table and plot relies on.
func TestImplsOrder(t *testing.T) {
	want := []string{"mutexbucket", "casbucket", "shardedbucket", "gcra", "rate", "xrate", "juju", "uber",
		"floor-since", "floor-atomicadd", "floor-paddedadd"}
	var got []string
	for _, im := range append(Impls[:len(Impls):len(Impls)], Floors...) {
		got = append(got, im.Name)
		if l, ok := Lookup(im.Name); !ok || l.Name != im.Name {
			t.Errorf("Lookup(%q) = %v, %v", im.Name, l.Name, ok)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("impls = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("impls = %q, want %q", got, want)
		}
	}
}

// TestAdapters checks that every adapter admits a full bucket's capacity and
// then rejects, and that TryAcquireN is all-or-nothing where ExactN says so
// and takes a part where it does not (juju). A rate of 1e-6/s adds nothing
// while the test runs.
func TestAdapters(t *testing.T) {
	for _, im := range Impls {
		t.Run(im.Name, func(t *testing.T) {
			if !im.Try {
				// uber: no non-blocking call; the adapter must say so
				// loudly rather than pretend.
				l, err := im.New(3, 1e-6)
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if recover() == nil {
						t.Error("TryAcquire did not panic on a blocking-only limiter")
					}
				}()
				l.TryAcquire()
				return
			}
			l, err := im.New(3, 1e-6)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if !l.TryAcquire() {
					t.Fatalf("TryAcquire #%d on a full bucket of 3 = false", i+1)
				}
			}
			if l.TryAcquire() {
				t.Fatal("TryAcquire on an empty bucket = true")
			}

			l, err = im.New(3, 1e-6)
			if err != nil {
				t.Fatal(err)
			}
			if !l.TryAcquireN(2) {
				t.Fatal("TryAcquireN(2) on a full bucket of 3 = false")
			}
			if l.TryAcquireN(2) {
				t.Fatal("TryAcquireN(2) with 1 token left = true")
			}
			// The failed call above took nothing if ExactN, its one
			// token otherwise.
			if got := l.TryAcquire(); got != im.ExactN {
				t.Fatalf("TryAcquire after a failed TryAcquireN(2) = %v, want %v (ExactN)", got, im.ExactN)
			}
		})
	}
}

// TestBenchCases builds every implementation for every benchmark case and
// makes a few calls: admit and n=8 must admit all, reject must admit none.
// A peer that rejected a case's parameters, or clamped them into a different
// workload, would fail here rather than skew a table.
func TestBenchCases(t *testing.T) {
	ctx := context.Background()
	for _, c := range append(tryCases[:len(tryCases):len(tryCases)], acquireCases...) {
		for _, im := range append(Impls[:len(Impls):len(Impls)], Floors...) {
			if !c.block && !im.Try {
				continue
			}
			t.Run(c.name+"/"+im.Name, func(t *testing.T) {
				l := handle(newCaseLimiter(t, im, c))
				const calls = 1000
				admitted := 0
				begin := time.Now()
				for range calls {
					var ok bool
					switch {
					case c.block:
						ok = l.Acquire(ctx) == nil
					case c.n == 1:
						ok = l.TryAcquire()
					default:
						ok = l.TryAcquireN(c.n)
					}
					if ok {
						admitted++
					}
				}
				switch {
				case c.name == "reject" && !im.Floor:
					if admitted != 0 {
						t.Errorf("admitted %d of %d on a drained bucket", admitted, calls)
					}
				case c.name == "mixed":
					// Depends on speed; the benchmark reports it.
				case c.name == "limited" && !im.Floor:
					// The burst, then what the rate refilled meanwhile.
					bound := float64(c.capacity) + c.rate*time.Since(begin).Seconds() + 1
					if admitted < int(c.capacity) || float64(admitted) > bound {
						t.Errorf("admitted %d of %d: want the burst of %d and at most %.0f", admitted, calls, c.capacity, bound)
					}
				default:
					if admitted != calls {
						t.Errorf("admitted %d of %d on a bucket that never empties", admitted, calls)
					}
				}
			})
		}
	}
}

// TestAcquireWaits checks that the blocking call of every implementation,
// uber included, returns after waiting on an empty limiter rather than
// failing. It asserts no duration.
func TestAcquireWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, im := range Impls {
		t.Run(im.Name, func(t *testing.T) {
			l, err := im.New(1, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := l.Acquire(ctx); err != nil {
					t.Fatalf("Acquire #%d: %v", i+1, err)
				}
			}
		})
	}
}
