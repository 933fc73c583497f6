package chanpool_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/admit-go/admit/chanpool"
)

// conn stands in for a network connection.
type conn struct{ id int }

func Example() {
	ctx := context.Background()
	next := 0
	p, err := chanpool.New(2,
		func(context.Context) (*conn, error) { next++; return &conn{id: next}, nil },
		chanpool.WithDestroy(func(c *conn) { fmt.Println("closing conn", c.id) }),
	)
	if err != nil {
		panic(err)
	}

	l, err := p.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("using conn", l.Value().id)
	l.Release()

	// The idle connection is reused rather than a second one opened.
	l, _ = p.Acquire(ctx)
	fmt.Println("using conn", l.Value().id)
	l.Release()

	st := p.Stats()
	fmt.Printf("created %d, idle %d, acquires %d\n", st.Created, st.Idle, st.Acquires)
	if err := p.Close(ctx); err != nil {
		panic(err)
	}
	// Output:
	// using conn 1
	// using conn 1
	// created 1, idle 1, acquires 2
	// closing conn 1
}

// A caller that finds its resource broken destroys it instead of releasing
// it; the slot is freed and the next caller gets a fresh resource.
func ExampleLease_Destroy() {
	ctx := context.Background()
	next := 0
	p, _ := chanpool.New(1, func(context.Context) (*conn, error) { next++; return &conn{id: next}, nil })

	l, _ := p.Acquire(ctx)
	fmt.Println("conn", l.Value().id, "broke")
	l.Destroy()

	l, _ = p.Acquire(ctx)
	fmt.Println("got conn", l.Value().id)
	l.Release()
	_ = p.Close(ctx)
	// Output:
	// conn 1 broke
	// got conn 2
}

// Releasing a lease twice is a programming error that would hand one
// resource to two callers; the pool detects it and panics.
func ExampleLease_Release_twice() {
	p, _ := chanpool.New(1, func(context.Context) (int, error) { return 42, nil })
	l, _ := p.Acquire(context.Background())
	l.Release()
	func() {
		defer func() { fmt.Println(recover()) }()
		l.Release()
	}()
	_ = p.Close(context.Background())
	// Output:
	// chanpool: Release called on a Lease that was already released or destroyed
}

// Close waits for leases to end until its context does, then reports how
// many are still out; they are destroyed when they are released.
func ExamplePool_Close() {
	p, _ := chanpool.New(2,
		func(context.Context) (*conn, error) { return &conn{id: 1}, nil },
		chanpool.WithDestroy(func(c *conn) { fmt.Println("closing conn", c.id) }),
	)
	l, _ := p.Acquire(context.Background())

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // do not wait at all
	fmt.Println(p.Close(ctx))

	_, err := p.Acquire(context.Background())
	fmt.Println(errors.Is(err, chanpool.ErrClosed))

	l.Release()
	fmt.Println(p.Close(context.Background()))
	// Output:
	// chanpool: close: 1 slot(s) still in use (leased or being checked out): context canceled
	// true
	// closing conn 1
	// <nil>
}

// With WithMaxWaiters, an exhausted pool sheds load instead of queueing
// without bound.
func ExampleWithMaxWaiters() {
	p, _ := chanpool.New(1,
		func(context.Context) (*strings.Builder, error) { return new(strings.Builder), nil },
		chanpool.WithMaxWaiters[*strings.Builder](0),
	)
	l, _ := p.Acquire(context.Background())
	_, err := p.Acquire(context.Background())
	fmt.Println(err)
	fmt.Println(errors.Is(err, chanpool.ErrSaturated))
	l.Release()
	_ = p.Close(context.Background())
	// Output:
	// chanpool: too many waiters (limit 0)
	// true
}
