package adaptive

import (
	"context"
	"strconv"
)

// Priority orders callers when the limiter is saturated: a higher priority
// is served first from the backlog, may take a lower one's place in a full
// backlog, and keeps more of the limit when callers are shed at once. The
// zero value is Normal.
type Priority int8

// The five priorities, highest first.
const (
	Critical  Priority = 2  // health checks, control traffic: shed last
	High      Priority = 1  // interactive, user-facing
	Normal    Priority = 0  // the default
	Low       Priority = -1 // prefetch, background refresh
	Sheddable Priority = -2 // batch and retries: shed first
)

const numPriorities = 5

// String returns the priority's name ("critical", "high", "normal", "low",
// "sheddable"), or "priority(N)" for a value outside the five.
func (p Priority) String() string {
	switch p {
	case Critical:
		return "critical"
	case High:
		return "high"
	case Normal:
		return "normal"
	case Low:
		return "low"
	case Sheddable:
		return "sheddable"
	}
	return "priority(" + strconv.Itoa(int(p)) + ")"
}

// clamp maps any value to one of the five priorities: above Critical is
// Critical, below Sheddable is Sheddable.
func (p Priority) clamp() Priority { return max(Sheddable, min(Critical, p)) }

// index is the priority's slot in per-priority arrays, 0 for Sheddable to 4
// for Critical.
func (p Priority) index() int { return int(p.clamp() - Sheddable) }

type priorityKey struct{}

// ContextWithPriority returns a copy of ctx that carries p; Acquire reads
// it. A value outside the five named priorities is taken as the nearest of
// them.
func ContextWithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p.clamp())
}

// PriorityFrom returns the priority ctx carries, Normal if none.
func PriorityFrom(ctx context.Context) Priority {
	if p, ok := ctx.Value(priorityKey{}).(Priority); ok {
		return p
	}
	return Normal
}
