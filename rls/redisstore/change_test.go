package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket/redistest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/internal/tick"
	"github.com/redis/go-redis/v9"
)

// TestCarryMatchesGo writes buckets under parameters that never refill,
// then decides them under new ones: the script's carry-over must give the
// debt package tick gives, exactly while fraction × per fits 2^53 and at
// most two units of debt more otherwise (never more balance). Half the
// buckets carry the signature an earlier admit-rls wrote, with a fifth
// number (its debt flag), which reads the same.
func TestCarryMatchesGo(t *testing.T) {
	srv := redistest.New(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	s, err := New(c, WithPrefix("carry:"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, 2))
	inexact, full := 0, 0
	for i := range 400 {
		old := tick.Params{CapU: 0, Per: 1 + rnd.Int64N(1<<uint(1+rnd.IntN(45))), Q: 1_000_000}
		old.CapU = old.Per * (1 + rnd.Int64N(max(1, (1<<50)/old.Per/2)))
		d := rnd.Int64N(old.MaxDebt() + 1)
		if i%10 == 0 {
			d = 0 // a full bucket: stays full
		}
		h := rls.Hit{Key: fmt.Sprint(i), Capacity: 1 + rnd.Int64N(1<<20), Count: 1 + rnd.Int64N(1<<20),
			Period: time.Duration(1+rnd.IntN(365*24*3600)) * time.Second, Debt: rnd.IntN(2) == 0}
		p, err := s.paramsFor(&h)
		if errors.Is(err, admit.ErrInvalidConfig) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sig := fmt.Sprintf("%d:%d:0:%d", old.CapU, old.Per, old.Q)
		if i%2 == 1 {
			sig += ":" + fmt.Sprint(rnd.IntN(2)) // an earlier version's signature
		}
		if err := c.Set(ctx, "carry:"+h.Key, fmt.Sprintf("%d 0 %s", d, sig), 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, tk, err := s.TakeForTest(ctx, h) // N = 0: a check, which writes the carry-over
		got := tk.D
		if err != nil {
			t.Fatal(err)
		}
		want := p.Carry(&old, d)
		if d == 0 {
			full++
			if got != 0 {
				t.Fatalf("a full bucket carried debt %d", got)
			}
		}
		frac := (old.CapU - d) - floorDiv(old.CapU-d, old.Per)*old.Per
		if frac < (1<<53)/p.Per-1 {
			if got != want {
				t.Fatalf("old %+v d %d → %+v: script %d, Go %d", old, d, p.Params, got, want)
			}
			continue
		}
		inexact++
		if got < want || got > want+2 {
			t.Fatalf("old %+v d %d → %+v: script %d, Go %d (inexact branch)", old, d, p.Params, got, want)
		}
	}
	t.Logf("%d of the cases took the inexact branch, %d were full", inexact, full)
	if full == 0 || inexact == 0 {
		t.Fatal("the cases missed a branch")
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// TestRingRefused: a go-redis Ring routes a request's script by its first
// key, so one bucket would live on several shards.
func TestRingRefused(t *testing.T) {
	srv := redistest.New(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}, ContextTimeoutEnabled: true})
	defer ring.Close()
	if s, err := New(ring); !errors.Is(err, admit.ErrInvalidConfig) || s != nil {
		t.Fatalf("New(ring) = %v, %v; want nil and ErrInvalidConfig", s, err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	ap, err := c.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	defer ap.Close()
	if s, err := New(ap); !errors.Is(err, admit.ErrInvalidConfig) || s != nil {
		t.Fatalf("New(AutoPipeliner) = %v, %v; want nil and ErrInvalidConfig", s, err)
	}
}

// TestOverridesBounded: the parameters of the limits requests bring are
// not kept beyond a fixed memo.
func TestOverridesBounded(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // Check needs no server
	defer c.Close()
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 100000 {
		if err := s.Check(rls.Hit{Capacity: int64(i + 1), Count: int64(i + 1), Period: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("100000 limits: %d bytes", grown)
	if grown > 128<<10 {
		t.Fatalf("the store grew by %d bytes", grown)
	}
	runtime.KeepAlive(s)
}
