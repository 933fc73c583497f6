package memo

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestMemo(t *testing.T) {
	var calls atomic.Int64
	m := New(func(k int) (int, error) {
		calls.Add(1)
		if k < 0 {
			return 0, errors.New("negative")
		}
		return 2 * k, nil
	})
	for range 3 {
		if v, err := m.Get(21); v != 42 || err != nil {
			t.Fatalf("Get(21) = %d, %v", v, err)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("f called %d times for one key", calls.Load())
	}
	if _, err := m.Get(-1); err == nil {
		t.Fatal("the error was lost")
	}
	if _, err := m.Get(-1); err == nil || calls.Load() != 3 {
		t.Fatalf("an error was remembered: %v, %d calls", err, calls.Load())
	}
	// Many keys from many goroutines, slots replaced under them: every
	// answer right (the race detector checks the publication).
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range 10000 {
				if v, _ := m.Get(k + g); v != 2*(k+g) {
					t.Errorf("Get(%d) = %d", k+g, v)
					return
				}
			}
		})
	}
	wg.Wait()
}
