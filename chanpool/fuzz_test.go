package chanpool_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/chanpool"
)

// model is a sequential specification of a Pool: a FIFO queue of slots,
// each empty (0) or holding a resource id, and a count of slots never used.
type model struct {
	t        *testing.T
	capacity int
	queue    []int
	unborn   int
	closed   bool
	now      int64

	maxIdle, maxLifetime, validateAfter int64
	validate                            bool

	createFails bool
	created     uint64 // also the id of the last resource created
	res         map[int]*mres
	leases      []mlease
	killed      []int // expected destruction order
	stats       chanpool.Stats
}

type mres struct {
	lastUsed, expires int64
	bad, dead         bool
}

type mlease struct {
	l     chanpool.Lease[*res]
	id    int
	ended bool
}

// destroy records the expected destruction of id for the reason counted by
// counter.
func (m *model) destroy(id int, counter *uint64) {
	m.killed = append(m.killed, id)
	m.res[id].dead = true
	*counter++
}

// take pops the next slot the way the pool does: the channel first, then a
// never-used slot. ok is false if the pool is exhausted.
func (m *model) take() (slot int, ok bool) {
	if len(m.queue) > 0 {
		slot, m.queue = m.queue[0], m.queue[1:]
		return slot, true
	}
	if m.unborn > 0 {
		m.unborn--
		return 0, true
	}
	return 0, false
}

// checkout predicts the resource handed out for slot, or 0 if create fails.
func (m *model) checkout(id int) int {
	if id != 0 {
		r := m.res[id]
		switch {
		case m.maxLifetime > 0 && m.now >= r.expires:
			m.destroy(id, &m.stats.DestroyedLifetime)
			id = 0
		case m.maxIdle > 0 && m.now-r.lastUsed >= m.maxIdle:
			m.destroy(id, &m.stats.DestroyedIdle)
			id = 0
		case m.validate && (m.validateAfter == 0 || m.now-r.lastUsed >= m.validateAfter) && r.bad:
			m.destroy(id, &m.stats.DestroyedValidation)
			id = 0
		}
	}
	if id == 0 {
		if m.createFails {
			m.stats.CreateErrors++
			m.queue = append(m.queue, 0)
			return 0
		}
		m.created++
		id = int(m.created)
		r := &mres{lastUsed: m.now}
		if m.maxLifetime > 0 {
			r.expires = m.now + m.maxLifetime - chanpool.LifetimeJitter(m.created, m.maxLifetime)
		}
		m.res[id] = r
		m.stats.Created++
	}
	m.stats.Acquires++
	return id
}

func (m *model) outstanding() int {
	n := 0
	for _, l := range m.leases {
		if !l.ended {
			n++
		}
	}
	return n
}

func (m *model) lease(b byte) *mlease {
	if len(m.leases) == 0 {
		return nil
	}
	return &m.leases[int(b)%len(m.leases)]
}

// FuzzPool drives a Pool on a fake clock through a sequence of operations
// decoded from the input and checks every result, every destruction and the
// statistics against the model. The first two bytes choose the capacity and
// the options; then each pair of bytes is an operation and its argument.
func FuzzPool(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 0, 2, 0, 2, 0})
	f.Add([]byte{1, 0xff, 0, 0, 0, 0, 4, 25, 0, 1, 2, 0, 2, 1, 3, 0, 4, 60, 1, 0, 7, 0, 2, 0})
	f.Add([]byte{3, 4, 6, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 2, 2, 3, 1, 8, 0, 5, 0, 1, 0, 5, 0, 0, 0, 8, 0})
	f.Add([]byte{2, 0x0f, 0, 0, 0, 1, 2, 0, 6, 0, 4, 3, 0, 0, 4, 7, 0, 0, 2, 1, 4, 49, 0, 0, 8, 0, 7, 0, 3, 0, 2, 1})
	f.Add([]byte{1, 0x03, 1, 0, 4, 9, 2, 0, 4, 19, 1, 0, 2, 0, 4, 30, 1, 0, 7, 0, 0, 0, 2, 0, 8, 0})
	f.Add([]byte{0, 0x04, 0, 0, 2, 0, 6, 0, 0, 0, 5, 0, 0, 0, 5, 0, 0, 0, 8, 0, 3, 0, 3, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		if len(data) > 2+2*256 {
			data = data[:2+2*256] // long inputs explore nothing new, slowly
		}
		runModel(t, data)
	})
}

func runModel(t *testing.T, data []byte) {
	clk := buckettest.NewFakeClock(0)
	m := &model{t: t, capacity: 1 + int(data[0]%4), res: map[int]*mres{}}
	m.unborn = m.capacity
	m.stats.Capacity = m.capacity
	flags := data[1]
	var opts []chanpool.Option[*res]
	if flags&1 != 0 {
		m.maxIdle = 20
		opts = append(opts, chanpool.WithMaxIdleTime[*res](time.Duration(m.maxIdle)))
	}
	if flags&2 != 0 {
		m.maxLifetime = 50
		opts = append(opts, chanpool.WithMaxLifetime[*res](time.Duration(m.maxLifetime)))
	}
	if flags&4 != 0 {
		m.validate = true
		opts = append(opts, chanpool.WithValidate(func(_ context.Context, r *res) error {
			if m.res[r.id].bad {
				return errors.New("bad")
			}
			return nil
		}))
	}
	if flags&8 != 0 {
		m.validateAfter = 5
		opts = append(opts, chanpool.WithValidateAfter[*res](time.Duration(m.validateAfter)))
	}
	fac := &factory{}
	opts = append(opts, chanpool.WithClock[*res](clk), chanpool.WithMaxWaiters[*res](0))
	p := newPool(t, m.capacity, fac, opts...)
	defer func() { // on failure, do not wait for leases the model still holds
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		_ = p.Close(ended)
	}()

	ctx := context.Background()
	ops := data[2:]
	for i := 0; i+1 < len(ops); i += 2 {
		op, arg := ops[i]%9, ops[i+1]
		step := fmt.Sprintf("op %d (%d, %d)", i/2, op, arg)
		switch op {
		case 0, 1: // TryAcquire, Acquire
			slot, ok := 0, false
			if !m.closed {
				slot, ok = m.take()
			}
			want := 0
			if ok {
				want = m.checkout(slot)
			}
			var l chanpool.Lease[*res]
			if op == 0 {
				var got bool
				l, got = p.TryAcquire()
				require.Equal(t, want != 0, got, step)
			} else {
				var err error
				l, err = p.Acquire(ctx)
				switch {
				case m.closed:
					require.Same(t, chanpool.ErrClosed, err, step)
				case !ok:
					require.ErrorIs(t, err, chanpool.ErrSaturated, step)
					m.stats.SaturatedAcquires++
				case want == 0:
					require.ErrorIs(t, err, errCreate, step)
				default:
					require.NoError(t, err, step)
				}
			}
			if want != 0 {
				require.Equal(t, want, l.Value().id, step)
				m.leases = append(m.leases, mlease{l: l, id: want})
			}
		case 2, 3: // Release, Destroy
			ml := m.lease(arg)
			if ml == nil {
				continue
			}
			end := ml.l.Release
			if op == 3 {
				end = ml.l.Destroy
			}
			if ml.ended {
				require.Panics(t, end, step)
				continue
			}
			end()
			ml.ended = true
			switch {
			case op == 3:
				m.destroy(ml.id, &m.stats.DestroyedCaller)
				if !m.closed {
					m.queue = append(m.queue, 0)
				}
			case m.closed:
				m.destroy(ml.id, &m.stats.DestroyedClosed)
			default:
				m.res[ml.id].lastUsed = m.now
				m.queue = append(m.queue, ml.id)
			}
		case 4: // time passes
			d := int64(arg % 64)
			m.now += d
			clk.Advance(time.Duration(d))
		case 5:
			m.createFails = !m.createFails
			if m.createFails {
				fac.setFail(errCreate)
			} else {
				fac.setFail(nil)
			}
		case 6: // the resource of a lease, or the next idle one, goes bad
			if ml := m.lease(arg); ml != nil && !ml.ended {
				m.res[ml.id].bad = true
			} else if len(m.queue) > 0 && m.queue[0] != 0 {
				m.res[m.queue[0]].bad = true
			}
		case 7: // Close with a context that has already ended
			if !m.closed {
				m.closed = true
				for _, id := range m.queue {
					if id != 0 {
						m.destroy(id, &m.stats.DestroyedClosed)
					}
				}
				m.queue, m.unborn = nil, 0
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			err := p.Close(cctx)
			if n := m.outstanding(); n > 0 {
				require.ErrorIs(t, err, context.Canceled, step)
				require.Contains(t, err.Error(), fmt.Sprintf(": %d slot(s) still in use (leased or being checked out)", n), step)
			} else {
				require.NoError(t, err, step)
			}
		case 8:
			want := m.stats
			want.InUse = m.outstanding()
			want.Idle = -want.InUse
			for _, r := range m.res {
				if !r.dead {
					want.Idle++
				}
			}
			require.Equal(t, want, p.Stats(), step)
		}
		require.Equal(t, m.killed, fac.killedIDs(), step)
		require.Equal(t, m.stats.Created, uint64(fac.nextID), step)
	}

	// Whatever happened, ending every lease lets Close finish, and every
	// resource is destroyed exactly once.
	for _, ml := range m.leases {
		if !ml.ended {
			ml.l.Release()
		}
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, p.Close(ended), "slot lost")
	fac.checkAllDestroyedOnce(t)
	if len(m.killed) > 0 {
		require.True(t, slices.Equal(m.killed, fac.killedIDs()[:len(m.killed)]))
	}
}
