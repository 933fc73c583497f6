package rate

import (
	"sync"
	"time"
)

// Sometimes performs an action occasionally. The First, Every and Interval
// fields govern the behaviour of Do, which performs the action. A zero
// Sometimes performs an action exactly once.
//
//	var sometimes = rate.Sometimes{First: 3, Interval: 10 * time.Second}
//	func Spammy() {
//		sometimes.Do(func() { log.Info("here I am!") })
//	}
//
// A Sometimes is safe for concurrent use and must not be copied after first
// use.
type Sometimes struct {
	First    int           // if non-zero, the first N calls to Do run f
	Every    int           // if non-zero, every Nth call to Do runs f
	Interval time.Duration // if non-zero and Interval has elapsed since f's last run, Do runs f

	mu    sync.Mutex
	count int       // calls to Do so far
	last  time.Time // when f last ran
}

// Do runs f as allowed by First, Every and Interval: the union, not the
// intersection, of the three filters. The first call always runs f. First:N
// runs it on the first N calls; Every:M on every Mth call, starting with the
// first; Interval on any call at least Interval after the last run.
//
// Calls to Do run serially: a call blocks while another runs f, so f
// should be short, and an f that calls Do on the same Sometimes deadlocks.
func (s *Sometimes) Do(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	run := s.count == 0 ||
		(s.First > 0 && s.count < s.First) ||
		(s.Every > 0 && s.count%s.Every == 0) ||
		(s.Interval > 0 && time.Since(s.last) >= s.Interval)
	if run {
		f()
		if s.Interval > 0 {
			s.last = time.Now()
		}
	}
	s.count++
}
