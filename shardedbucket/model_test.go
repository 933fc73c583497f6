package shardedbucket

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
)

// TestModel and FuzzModel drive takeAt, reserve and the undos directly, on
// a FakeClock and from random start shards, so that every interleaving of
// takes, gathers, reservations, cancellations (the newest and older ones),
// small steps and refill past the cap is one goroutine's sequence. Each
// admission is recorded at its time, a reservation at its wake, and the
// model checks the window bound on every window, that no TryAcquire or
// immediate reservation succeeds while an uncancelled reservation is still
// waiting, and that the bucket is full again after idling (no debt leaks).
// It catches a reservation undo that ignores the tail rule at once. A
// concurrent caller is staged inside gathers (see runModel), so that they
// lose races and put back, inside reserve too.
// A deadlock, such as a put-back waiting for the resvMu its own goroutine
// holds, fails the seed with every goroutine's stack instead of hanging.
func TestModel(t *testing.T) {
	for seed := range uint64(2000) {
		checkModel(t, seed)
	}
}

func FuzzModel(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed)
	}
	f.Fuzz(checkModel)
}

func checkModel(t *testing.T, seed uint64) {
	var err error
	buckettest.Watchdog(t, buckettest.HangAfter, fmt.Sprintf("model seed %d", seed), func() { err = modelSeed(seed) })
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
}

// modelRates include blocks smaller than a token (1e9/s: one unit a token)
// and fractional rates.
var modelRates = []float64{1, 0.5, 3, 1.0 / 3, 1000, 1e9, 7.3, 1e8, 2.5e8}

func modelSeed(seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	capacity := int64(r.IntN(40) + 1)
	if r.IntN(4) == 0 {
		capacity = int64(r.IntN(4) + 1)
	}
	rate := modelRates[r.IntN(len(modelRates))]
	shards := 1 << r.IntN(5)
	for int64(shards) > capacity {
		shards >>= 1
	}
	if err := runModel(r, capacity, rate, shards); err != nil {
		return fmt.Errorf("capacity %d, rate %v, %d shards: %w", capacity, rate, shards, err)
	}
	return nil
}

// pend is a reservation the model holds: its wake, size and undo.
type pend struct {
	wake int64
	n    int64
	undo func() bool
	done bool
}

func runModel(r *rand.Rand, capacity int64, rate float64, shards int) error {
	clk := buckettest.NewFakeClock(0)
	b, err := New(capacity, rate, admit.WithClock(clk), WithShards(shards))
	if err != nil {
		return err
	}
	period := int64(float64(time.Second) / rate)
	var adm []buckettest.Admission
	var ps []*pend
	var log []string
	made := 0
	// A concurrent caller, staged in gathers: now and then it takes a
	// whole token, first, from the shard the gather planned to take the
	// most from (a TryAcquire that won the race), so that gathers lose
	// races and put back, from TryAcquireN and from inside reserve alike.
	var stolen error
	testHookGather = func(b *Bucket, v int64, start uint, take []int64) {
		if r.IntN(3) != 0 || !stealOne(b, v, start, take) {
			return
		}
		now := clk.Now()
		log = append(log, fmt.Sprintf("t=%d stole(1) in a gather of %v", now, take))
		adm = append(adm, buckettest.Admission{At: now, N: 1})
		for _, p := range ps {
			if !p.done && p.wake > now && stolen == nil {
				stolen = fmt.Errorf("a concurrent take at %d overtook a waiter due at %d", now, p.wake)
			}
		}
	}
	defer func() { testHookGather = nil }()
	for range 60 + r.IntN(200) {
		if stolen != nil {
			return fmt.Errorf("%w\n%v", stolen, log)
		}
		now := clk.Now()
		switch op := r.IntN(10); op {
		case 0, 1: // TryAcquireN at a random start shard
			n := int64(r.IntN(int(capacity)+1)) + 1
			if n > capacity {
				n = 1
			}
			ok := b.takeAt(b.p.Units(n), b.p.V(now), uint(r.IntN(64)))
			log = append(log, fmt.Sprintf("t=%d try(%d)=%v", now, n, ok))
			if ok {
				adm = append(adm, buckettest.Admission{At: now, N: n})
				for _, p := range ps {
					if !p.done && p.wake > now {
						return fmt.Errorf("TryAcquireN(%d) at %d overtook a waiter due at %d\n%v", n, now, p.wake, log)
					}
				}
			}
		case 2: // drain with TryAcquire
			k := int64(0)
			for b.takeAt(b.p.Units(1), b.p.V(now), uint(r.IntN(64))) {
				k++
			}
			if k > 0 {
				adm = append(adm, buckettest.Admission{At: now, N: k})
				for _, p := range ps {
					if !p.done && p.wake > now {
						return fmt.Errorf("drain(%d) at %d overtook a waiter due at %d\n%v", k, now, p.wake, log)
					}
				}
			}
			log = append(log, fmt.Sprintf("t=%d drain=%d", now, k))
		case 3, 4: // reserve
			n := int64(r.IntN(int(capacity))) + 1
			wait, undo := b.reserve(b.p.Units(n), math.MaxInt64)
			log = append(log, fmt.Sprintf("t=%d reserve(%d) wait=%d", now, n, wait))
			switch {
			case wait == 0:
				adm = append(adm, buckettest.Admission{At: now, N: n})
				for _, p := range ps {
					if !p.done && p.wake > now {
						return fmt.Errorf("reserve(%d) at %d taken at once overtook a waiter due at %d\n%v", n, now, p.wake, log)
					}
				}
			case wait < 0:
				return fmt.Errorf("reserve(%d) = Never\n%v", n, log)
			default:
				ps = append(ps, &pend{wake: now + wait, n: n, undo: undo})
				made++
			}
		case 5, 6: // cancel a random pending waiter
			var live []*pend
			for _, p := range ps {
				if !p.done {
					live = append(live, p)
				}
			}
			if len(live) == 0 {
				continue
			}
			p := live[r.IntN(len(live))]
			if r.IntN(3) == 0 {
				p = live[len(live)-1] // newest: exercise give-backs
			}
			p.done = true
			if p.wake <= now {
				adm = append(adm, buckettest.Admission{At: p.wake, N: p.n})
				continue
			}
			cancelled := p.undo()
			log = append(log, fmt.Sprintf("t=%d undo(wake %d)=%v", now, p.wake, cancelled))
			if !cancelled {
				return fmt.Errorf("undo before the wake reported due\n%v", log)
			}
		case 7: // small step
			clk.Advance(time.Duration(r.Int64N(period/4 + 2)))
		case 8: // a few ns
			clk.Advance(time.Duration(r.IntN(5)))
		case 9: // big step
			clk.Advance(time.Duration(period * int64(r.IntN(int(capacity)+2))))
		}
		log = log[max(0, len(log)-60):] // the recent steps, for the failure message
		// waiters whose wake passed are admitted
		now = clk.Now()
		for _, p := range ps {
			if !p.done && p.wake <= now {
				p.done = true
				adm = append(adm, buckettest.Admission{At: p.wake, N: p.n})
			}
		}
	}
	if stolen != nil {
		return fmt.Errorf("%w\n%v", stolen, log)
	}
	for _, p := range ps {
		if !p.done {
			p.done = true
			adm = append(adm, buckettest.Admission{At: p.wake, N: p.n})
		}
	}
	if err := buckettest.CheckAdmissions(capacity, rate, adm); err != nil {
		return fmt.Errorf("%v\n%v", err, log)
	}
	clk.Advance(time.Duration(period * int64(made+2) * (capacity + int64(shards) + 2)))
	if got := b.Tokens(); got != float64(capacity) {
		return fmt.Errorf("not full after idling: %v\n%v", got, log)
	}
	return nil
}
