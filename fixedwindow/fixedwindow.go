// Package fixedwindow implements a fixed-window counter: time is cut into
// aligned windows of equal length and each window admits at most limit.
//
// The limiter stores the index of the current window and how many it has
// admitted; a call in a later window starts the count again at zero. That is
// two words and one comparison, the cheapest limiter there is, and the state
// per key is 16 bytes of counters (the per-key cost in a keyed table).
//
// Windows are aligned to the limiter's creation: window k is
// [k·window, (k+1)·window) in elapsed time since New, so the first one is
// full length.
//
// # The boundary burst
//
// The price of the aligned windows is the boundary: limit requests at the
// end of one window and limit more at the start of the next are all
// admitted, so a span of the window's length that straddles a boundary can
// see 2 × limit. That is the declared bound, and it is reached: at most limit
// in every aligned window, at most 2 × limit in any span of the window's
// length (and 1 + ⌈(span−1)/window⌉ windows' worth in longer spans). Pick
// the sliding log when no span may exceed limit, the sliding window
// counter when a close estimate is enough, and a token bucket when the
// burst should be a number you choose rather than an accident of the clock.
//
// # Concurrency
//
// A sync.Mutex guards the state: the (window, count) pair must change
// together (a count read against the wrong window index is wrong), and the
// clock is read inside the lock so that a stale reading cannot be applied
// after a later one. A reading older than the latest applied is treated as
// the latest, so time never runs backwards.
//
// Blocking: a caller that does not fit in the current window reserves its
// place in the first window that has room, at or after any earlier waiter's,
// and sleeps until that window opens. TryAcquire never overtakes a waiter.
package fixedwindow

import (
	"context"
	"sync"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
	"github.com/admit-go/admit/internal/windowed"
)

// Limiter is a fixed-window counter. It is safe for concurrent use. The
// zero value is not usable; create one with New. A Limiter must not be
// copied after first use.
//
// Fairness: blocked callers are admitted in arrival order, each in the first
// window with room for it behind the callers before it.
type Limiter struct {
	mu    sync.Mutex
	win   int64         // index of the latest window that holds admissions or reservations; requires mu
	count int64         // admitted in window win; requires mu
	last  int64         // latest elapsed reading applied; requires mu
	resv  windowed.Tail // the reservation that made (win, count), if still on top; requires mu

	limit int64        // immutable
	w     int64        // window length in ns; immutable
	clk   refill.Clock // immutable
}

var _ admit.Limiter = (*Limiter)(nil)

// New returns a limiter that admits at most limit in each aligned window of
// the given length. It returns an error wrapping admit.ErrInvalidConfig for
// a limit below 1 or above 2^40, or a window that is not positive or is
// longer than 2^60 ns.
func New(limit int64, window time.Duration, opts ...admit.Option) (*Limiter, error) {
	cfg, err := admit.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if err := windowed.Validate(limit, window, windowed.MaxLimit); err != nil {
		return nil, err
	}
	return &Limiter{limit: limit, w: int64(window), clk: refill.NewClock(cfg.Clock)}, nil
}

// TryAcquire admits one request if the current window has room.
func (l *Limiter) TryAcquire() bool { return l.TryAcquireN(1) }

// TryAcquireN admits n if the current window has room for all n and no
// blocked caller is waiting, and reports whether it did. TryAcquireN(0) is
// true; n < 0 or n > limit is false.
func (l *Limiter) TryAcquireN(n int64) bool {
	if n == 0 {
		return true
	}
	if n < 0 || n > l.limit {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.current()
	if l.win != k || l.count+n > l.limit {
		return false // full, or waiters hold a later window
	}
	l.count += n
	l.resv.Admitted()
	return true
}

// Acquire blocks until one request is admitted; see AcquireN.
func (l *Limiter) Acquire(ctx context.Context) error { return l.AcquireN(ctx, 1) }

// AcquireN blocks until n are admitted or ctx ends, as documented on
// admit.Limiter: it sleeps until the first window with room for n behind
// every earlier waiter opens. n > limit fails at once with
// admit.ErrUnsatisfiable.
func (l *Limiter) AcquireN(ctx context.Context, n int64) error {
	return windowed.Acquire(ctx, &l.clk, l.limit, "the limit", n, l.reserve)
}

// Tokens returns how many more the current window admits now: 0 while
// blocked callers hold a later window.
func (l *Limiter) Tokens() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := l.current(); l.win == k {
		return float64(l.limit - l.count)
	}
	return 0
}

// current reads the clock and returns the current window's index, moving
// (win, count) to it if it is newer: a new window starts empty. Requires mu.
func (l *Limiter) current() int64 {
	k := windowed.Now(&l.clk, &l.last) / l.w
	if k > l.win {
		l.win, l.count = k, 0
	}
	return k
}

// reserve is the blocking step; see window.Reserve.
func (l *Limiter) reserve(n, limit int64) (int64, refill.Pending) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.current()
	if l.win == k && l.count+n <= l.limit {
		l.count += n
		l.resv.Admitted()
		return 0, refill.Pending{}
	}
	// The first window with room at or after the latest one held: win
	// itself (a future window with room), else the one after it, which is
	// empty and n <= limit fits.
	j, c := l.win, l.count+n
	if c > l.limit {
		j, c = l.win+1, n
	}
	wake := j * l.w
	if wake > refill.Horizon {
		return windowed.Never, refill.Pending{}
	}
	wait := wake - l.last
	if wait > limit {
		return wait, refill.Pending{}
	}
	prevWin, prevCount := l.win, l.count
	l.win, l.count = j, c
	id, below := l.resv.Push()
	return wait, refill.Pending{At: wake, Undo: func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if windowed.Now(&l.clk, &l.last) >= wake {
			return false // due: the caller is admitted
		}
		// Tail rule: undo only the reservation on top. An admission resets
		// top, and none lands in window j before it opens.
		if l.resv.Pop(id, below) {
			l.win, l.count = prevWin, prevCount
		}
		return true
	}}
}
