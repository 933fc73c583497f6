package ratelimit

import (
	"fmt"

	"github.com/admit-go/admit"
)

// Set is one list of limits rendered for the fields. It is immutable once
// built, so it is safe for concurrent use and may be shared without locks.
type Set struct {
	Limits []admit.Limit // the list, as given to NewSet
	Names  []string      // Names[i] is Limits[i]'s name in the fields, quoted
	Policy string        // the RateLimit-Policy value: every limit, in order
}

// NewSet renders limits, showing an unnamed limit as unnamed (the
// middleware's policy name). The Set keeps limits: the caller must not
// modify it afterwards. NewSet fails, wrapping admit.ErrInvalidConfig, on
// what admit.ValidateLimits rejects, and when the unnamed limit would be
// shown under the name of another: RateLimit could not tell them apart.
func NewSet(limits []admit.Limit, unnamed string) (*Set, error) {
	if err := admit.ValidateLimits(limits); err != nil {
		return nil, err
	}
	s := &Set{Limits: limits, Names: make([]string, len(limits))}
	var b []byte
	for i, l := range limits {
		name := l.Name
		if name == "" {
			name = unnamed
			for j, o := range limits {
				if j != i && o.Name == unnamed {
					return nil, fmt.Errorf("%w: limit %d has no Name and would be shown as %q, the Name of limit %d",
						admit.ErrInvalidConfig, i, unnamed, j)
				}
			}
		}
		s.Names[i] = Quote(name)
		if i > 0 {
			b = append(b, ", "...)
		}
		b = AppendPolicy(b, s.Names[i], l.Capacity, FillSeconds(l))
	}
	s.Policy = string(b)
	return s, nil
}

// Name returns the quoted name of the limit named policy, and false if the
// set has none (a Decision from a failure policy's fallback limiter) or is
// nil.
func (s *Set) Name(policy string) (string, bool) {
	if s == nil {
		return "", false
	}
	for i := range s.Limits {
		if s.Limits[i].Name == policy {
			return s.Names[i], true
		}
	}
	return "", false
}
