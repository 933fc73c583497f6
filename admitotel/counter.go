package admitotel

import (
	"errors"

	"github.com/admit-go/admit"
)

// Counter counts decisions its caller makes and reports them under the
// instruments Wrap reports (admit.decisions, admit.tokens,
// admit.backend.errors, with admit.limiter = WithName's name), for a decider
// that is neither an admit.KeyedLimiter nor an admit.Limiter: admit-rls, for
// one, decides all the buckets of a request together and counts the request
// once, on the Counter of its domain. It counts as Wrap does, in the same
// per-processor counters (a Limiter counts through one), so Count records
// nothing through the metric API and allocates nothing. It has no key
// table: the key instruments are not reported.
//
// A Counter is safe for concurrent use; build one with NewCounter (the zero
// value is not usable). It must not be copied after first use.
type Counter struct {
	c *counters
	// remote is false for a limiter with keyed's Stats: it has no backend,
	// and its admit.ErrUnavailable is a new key refused for want of room,
	// which admit.keys.refused counts. A Counter from NewCounter is remote.
	remote bool
}

// NewCounter returns a Counter with nothing counted. Its instruments are
// created on the MeterProvider WithMeterProvider names, and their callback
// stays registered for the provider's lifetime: build one per name (a
// limiter, a domain) at start-up or when the name is first seen, from a
// bounded set of names. An error from creating them, or an invalid option,
// is returned (options' errors wrap admit.ErrInvalidConfig).
func NewCounter(opts ...Option) (*Counter, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	c := &Counter{c: newCounters(), remote: true}
	if _, err := newInstruments(cfg, c.c, nil); err != nil {
		return nil, err
	}
	return c, nil
}

// Count counts one decision that asked for n tokens as Wrap counts an
// AllowN(ctx, key, n) that returned d and err: admit.result is "error" if
// err is not nil (and admit.backend.errors counts it too if err wraps
// admit.ErrUnavailable), else "allowed" or "denied" by d.Allowed; d.Policy,
// if not "", is admit.policy. Only d.Allowed and d.Policy are read, so a
// caller without a Decision passes admit.Decision{Allowed: ok}.
func (c *Counter) Count(d admit.Decision, n int64, err error) {
	c.count(d.Allowed, d.Policy, n, err)
}

// count adds one decision to the counters.
func (c *Counter) count(allowedD bool, policy string, n int64, err error) {
	switch {
	case err != nil:
		c.c.add(failed, n, c.remote && errors.Is(err, admit.ErrUnavailable), policy)
	case allowedD:
		c.c.add(allowed, n, false, policy)
	default:
		c.c.add(denied, n, false, policy)
	}
}
