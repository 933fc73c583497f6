package chanpool

// LifetimeJitter exposes the lifetime jitter to the black-box tests, so that
// the model in FuzzPool can predict expiry to the nanosecond.
var LifetimeJitter = lifetimeJitter

// SetTestHookBeforeSend sets the hook that runs in put between the first
// read of the closed flag and the send on the channel. Tests set it only
// while no pool is in use by another goroutine.
func SetTestHookBeforeSend(f func()) { testHookBeforeSend = f }

// SetTestHookSaturated sets the hook that runs when a caller is refused with
// ErrSaturated. Tests set it only while no pool is in use by another
// goroutine.
func SetTestHookSaturated(f func()) { testHookSaturated = f }

// SetTestHookReceived sets the hook that runs in a waiter that received a
// slot, before it counts itself out of the waiters. Tests set it only while
// no pool is in use by another goroutine.
func SetTestHookReceived(f func()) { testHookReceived = f }

// WaitingCount reads the pool's raw count of waiters, which Stats clamps at
// zero, for the concurrent walk.
func WaitingCount[T any](p *Pool[T]) int64 { return p.waiting.Load() }
