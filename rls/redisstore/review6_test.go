package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
)

// TestReview6BusyMarkedRunStaysMark: a key of burst 10 at 10 an hour (L)
// has 9 left; a request under S (burst 5, 5 a second) clamps it (a mark,
// 5 under L), and S then takes 1 every 250 ms for 3 s, every take
// admitted and refilled before the next. The mark would have expired 1 s
// after it was made (a fill from empty under S); the docs say an admitted
// take from a mark, refilled, keeps the mark's limit "until the mark would
// have expired", and memory reads the refilled S bucket as full. Read
// under L 400 ms after the last take (S full again), memory admits 10;
// the tracked store's run bit is never cleared while the key stays busy
// (each write keeps "m" and PX only the take's refill), so L reads the
// mark's 5 of 10, 2 s after the mark would have expired, and stays 5
// short for half an hour (L's refill), for as long as S keeps the key
// busy.
func TestReview6BusyMarkedRunStaysMark(t *testing.T) {
	type st struct {
		name string
		s    rls.Store
	}
	stores := []st{{"memstore", memstore.New()}}
	for _, x := range trackedStores(t) {
		stores = append(stores, st{x.name, x.s})
	}
	got := map[string]int{}
	for _, x := range stores {
		L := rls.Hit{Key: "bmr", Capacity: 10, Count: 10, Period: time.Hour, N: 1}
		S := rls.Hit{Key: "bmr", Capacity: 5, Count: 5, Period: time.Second, N: 1}
		if a, _ := decide1(t, x.s, L); !a {
			t.Fatalf("%s: L 1 refused", x.name)
		}
		end := time.Now().Add(3 * time.Second)
		for time.Now().Before(end) {
			if a, _ := decide1(t, x.s, S); !a {
				t.Fatalf("%s: S 1 refused", x.name)
			}
			time.Sleep(250 * time.Millisecond)
		}
		time.Sleep(400 * time.Millisecond)
		n := 0
		for range 10 {
			if a, _ := decide1(t, x.s, L); a {
				n++
			}
		}
		got[x.name] = n
		_ = context.Background
	}
	for _, x := range stores[1:] {
		if got[x.name] < got["memstore"] {
			t.Errorf("%s: L admits %d of 10 after S's takes refilled, memory %d: the busy key keeps the mark's limit 2 s after the mark would have expired", x.name, got[x.name], got["memstore"])
		}
	}
}
