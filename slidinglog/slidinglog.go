// Package slidinglog implements a sliding-window log: it remembers the time
// of every admission in the last window and admits a request only if the
// window ending now holds room for it.
//
// It is exact. Never more than limit are admitted in any span of the
// window's length, wherever the span starts, under any concurrency: the
// declared bound is limit per window, ⌈span/window⌉ × limit over longer
// spans. There is no boundary burst (compare fixedwindow) and no estimate
// (compare slidingwindow).
//
// # Memory
//
// The exactness is paid in memory: O(limit) timestamps. The log is a ring of
// int64 elapsed times, one per admitted unit (TryAcquireN(n) writes n), sized
// to limit at New, so a limiter holds 8 × limit bytes plus a fixed header
// (make algorithms measures it: about 8 KiB at limit 1000, against 16 bytes
// of counters for fixedwindow). Per client, in a keyed table, that is the
// whole cost; it is the reason the counting algorithms exist. A TryAcquire
// never grows the ring, so it never allocates; blocked callers holding
// reservations beyond the window can grow it.
//
// An admission at time t is in the window (t − window, t]: an entry expires
// once it is window old, and a request at time now is admitted if the
// entries after now − window plus its own n are at most limit.
//
// # Concurrency
//
// A sync.Mutex guards the log: a decision reads and updates the head, the
// tail and the entries between, far more than one word. The clock is read
// inside the lock, and a reading older than the latest applied is treated as
// the latest, so entries are appended in time order and time never runs
// backwards. Expiry is amortised O(1): each entry is dropped once.
//
// Blocking: a caller that does not fit reserves its entries at the earliest
// time the window will have room for them, at or after every earlier
// waiter's, and sleeps until then. TryAcquire never overtakes a waiter.
package slidinglog

import (
	"context"
	"sync"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
	"github.com/admit-go/admit/internal/windowed"
)

// MaxLimit is the largest limit New accepts: 2^24 entries, a 128 MiB log.
const MaxLimit = int64(1) << 24

// Limiter is a sliding-window log. It is safe for concurrent use. The zero
// value is not usable; create one with New. A Limiter must not be copied
// after first use.
//
// Fairness: blocked callers are admitted in arrival order.
type Limiter struct {
	mu   sync.Mutex
	log  []int64       // ring of admission times, oldest at head, non-decreasing; requires mu
	head int           // index of the oldest entry; requires mu
	size int           // entries in use; requires mu
	last int64         // latest elapsed reading applied; requires mu
	resv windowed.Tail // the reservation whose entries end the log, if still on top; requires mu

	limit int64        // immutable
	w     int64        // window length in ns; immutable
	clk   refill.Clock // immutable
}

var _ admit.Limiter = (*Limiter)(nil)

// New returns a limiter that admits at most limit in any span of the given
// length. It returns an error wrapping admit.ErrInvalidConfig for a limit
// below 1 or above MaxLimit, or a window that is not positive or is longer
// than 2^60 ns. It allocates the log: 8 × limit bytes.
func New(limit int64, window time.Duration, opts ...admit.Option) (*Limiter, error) {
	cfg, err := admit.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if err := windowed.Validate(limit, window, MaxLimit); err != nil {
		return nil, err
	}
	return &Limiter{
		log:   make([]int64, limit),
		limit: limit,
		w:     int64(window),
		clk:   refill.NewClock(cfg.Clock),
	}, nil
}

// TryAcquire admits one request if the window ending now has room.
func (l *Limiter) TryAcquire() bool { return l.TryAcquireN(1) }

// TryAcquireN admits n if the window ending now has room for all n and no
// blocked caller is waiting, and reports whether it did. TryAcquireN(0) is
// true; n < 0 or n > limit is false. It costs O(n): one entry per unit.
func (l *Limiter) TryAcquireN(n int64) bool {
	if n == 0 {
		return true
	}
	if n < 0 || n > l.limit {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.expire()
	if l.size > 0 && l.at(l.size-1) > now {
		return false // waiters hold later entries
	}
	if int64(l.size)+n > l.limit {
		return false
	}
	l.push(now, n) // fits: size + n <= limit = len(log)
	l.resv.Admitted()
	return true
}

// Acquire blocks until one request is admitted; see AcquireN.
func (l *Limiter) Acquire(ctx context.Context) error { return l.AcquireN(ctx, 1) }

// AcquireN blocks until n are admitted or ctx ends, as documented on
// admit.Limiter: it sleeps until the window has room for n behind every
// earlier waiter. n > limit fails at once with admit.ErrUnsatisfiable.
func (l *Limiter) AcquireN(ctx context.Context, n int64) error {
	return windowed.Acquire(ctx, &l.clk, l.limit, "the limit", n, l.reserve)
}

// Tokens returns how many more the window ending now admits: 0 while
// blocked callers hold later entries.
func (l *Limiter) Tokens() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.expire()
	if l.size > 0 && l.at(l.size-1) > now {
		return 0
	}
	return float64(l.limit - int64(l.size))
}

// at returns the i-th entry from the oldest. Requires mu and i < size.
func (l *Limiter) at(i int) int64 {
	j := l.head + i
	if j >= len(l.log) {
		j -= len(l.log)
	}
	return l.log[j]
}

// expire reads the clock, drops the entries at least a window old and
// returns the reading. Requires mu.
func (l *Limiter) expire() int64 {
	now := windowed.Now(&l.clk, &l.last)
	for l.size > 0 && l.log[l.head] <= now-l.w {
		l.head++
		if l.head == len(l.log) {
			l.head = 0
		}
		l.size--
	}
	return now
}

// push appends n entries at t, growing the ring if they do not fit (only
// reservations can need that). Requires mu and t >= every entry.
func (l *Limiter) push(t, n int64) {
	if need := l.size + int(n); need > len(l.log) {
		// The allocation of a reservation that reaches beyond the window:
		// the log keeps every reserved entry until it expires.
		grown := make([]int64, max(2*len(l.log), need))
		for i := range l.size {
			grown[i] = l.at(i)
		}
		l.log, l.head = grown, 0
	}
	for range n {
		j := l.head + l.size
		if j >= len(l.log) {
			j -= len(l.log)
		}
		l.log[j] = t
		l.size++
	}
}

// reserve is the blocking step; see windowed.Reserve.
func (l *Limiter) reserve(n, limit int64) (int64, refill.Pending) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.expire()
	t := now
	if l.size > 0 {
		t = max(t, l.at(l.size-1)) // behind every earlier waiter
	}
	// The entries are sorted, so once the one limit−n from the newest has
	// expired, at most limit−n remain in the window and n fit.
	if i := l.size - int(l.limit-n) - 1; i >= 0 {
		t = max(t, l.at(i)+l.w)
	}
	if t == now {
		l.push(now, n)
		l.resv.Admitted()
		return 0, refill.Pending{}
	}
	if t > refill.Horizon {
		return windowed.Never, refill.Pending{}
	}
	wait := t - now
	if wait > limit {
		return wait, refill.Pending{}
	}
	l.push(t, n)
	id, below := l.resv.Push()
	return wait, refill.Pending{At: t, Undo: func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.expire() >= t {
			return false // due: the caller is admitted
		}
		// Tail rule: undo only the reservation whose entries end the log.
		// They lie after now, so expiry has not touched them.
		if l.resv.Pop(id, below) {
			l.size -= int(n)
		}
		return true
	}}
}
