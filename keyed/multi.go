package keyed

// The hooks through which a key whose state moved to a multi-limit entry
// (st == moved) is decided, dropped, evicted and timed. No state moves yet:
// only the primary limit exists.

func (l *Limiter) takeMoved(_ *entry, t, need int64) outcome {
	v := l.p.V(t)
	return outcome{t: t, v: v, z: v - l.p.Cap + need}
}
func (l *Limiter) dropMulti(*entry, int64) bool { return false }
func (l *Limiter) killMulti(*entry) bool        { return false }
func (l *Limiter) fullAtMulti(*entry) int64     { return 0 }
