package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/adaptive"
)

// A call takes a permit, does its work, and reports how it went.
func Example() {
	l, err := adaptive.New() // Gradient, limit 20 to start, shed at once
	if err != nil {
		panic(err)
	}
	call := func(ctx context.Context) error {
		p, err := l.Acquire(ctx)
		if err != nil {
			return err // wraps admit.ErrOverloaded: answer 503, do not queue
		}
		if err := doWork(ctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				p.Dropped() // a timeout: a sign of overload
			} else {
				p.Ignore() // says nothing about load
			}
			return err
		}
		p.Success() // its latency is a sample
		return nil
	}
	fmt.Println(call(context.Background()), l.InFlight(), l.Limit())
	// Output: <nil> 0 20
}

func doWork(context.Context) error { return nil }

// With a backlog, callers beyond the limit wait, highest priority first,
// instead of being shed at once.
func ExampleWithBacklog() {
	l, err := adaptive.New(adaptive.WithInitialLimit(1), adaptive.WithBacklog(16, 50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	p, _ := l.Acquire(ctx)
	// The only permit is out: this caller waits up to 50 ms, and is shed.
	_, err = l.Acquire(adaptive.ContextWithPriority(ctx, adaptive.High))
	fmt.Println(errors.Is(err, admit.ErrOverloaded))
	p.Success()
	// Output: true
}
