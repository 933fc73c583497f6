package redisbucket_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/admit-go/admit/redisbucket"
)

// With MaxLeases live batch leases, a decision on a new key looks at a
// bounded number of them, not all (a full sweep of 4 096 under the
// batcher's lock cost about a millisecond per new key); and once leases
// expire, new keys find and drop expired ones.
func TestBatchSweepBounded(t *testing.T) {
	ctx := context.Background()
	const age = 3 * time.Second
	l, _, _ := newLimiter(t, 3, 0.001, redisbucket.WithBatch(3, age))
	filled := time.Now()
	for i := range redisbucket.MaxLeases {
		if d, err := l.AllowN(ctx, strconv.Itoa(i), 1); err != nil || !d.Allowed {
			t.Fatalf("key %d: %+v, %v", i, d, err)
		}
	}
	last := time.Now() // the last lease was taken before this
	const newKeys = 20
	before := redisbucket.SweepExamined(l)
	for i := range newKeys {
		if d, err := l.AllowN(ctx, "new-"+strconv.Itoa(i), 1); err != nil || !d.Allowed {
			t.Fatalf("new key %d: %+v, %v", i, d, err)
		}
	}
	// (Checked while every lease is live, which a machine too loaded to
	// fill the table within the age would not reach.)
	if time.Since(filled) < age {
		examined := redisbucket.SweepExamined(l) - before
		t.Logf("%d new keys over %d live leases looked at %d leases", newKeys, redisbucket.MaxLeases, examined)
		if examined > newKeys*64 {
			t.Errorf("%d new keys looked at %d leases: each swept the whole table", newKeys, examined)
		}
	}
	// Past the age every lease has expired: a new key drops some and is
	// batched itself. Counted from the end of the fill, not its start: a
	// slow fill (thousands of round trips under -race) leaves the later
	// leases live for that much longer, and a sample of them dropped none.
	time.Sleep(time.Until(last.Add(age + 100*time.Millisecond)))
	if d, err := l.AllowN(ctx, "late", 1); err != nil || !d.Allowed {
		t.Fatalf("late key: %+v, %v", d, err)
	}
	if n := redisbucket.Leases(l); n >= redisbucket.MaxLeases {
		t.Errorf("after the leases expired a new key left %d leases: none dropped", n)
	}
}
