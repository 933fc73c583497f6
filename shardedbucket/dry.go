package shardedbucket

// dryWorth is the shortest dry spell, in nanoseconds, worth publishing a dry
// bound for (see Bucket.dry and gather).
const dryWorth = 1000

// survey reads every shard at stream value v, loads only: what they hold
// above zero in all, and the largest balance and its shard (-1 if none is
// above zero).
func (b *Bucket) survey(v int64) (sum, most int64, fullest int) {
	fullest = -1
	for i := range b.shards {
		bal, _, _ := b.shards[i].state(v, &b.g)
		sum += max(bal, 0)
		if bal > most {
			most, fullest = bal, i
		}
	}
	return sum, most, fullest
}

// publishDry publishes the dry bound at stream value v: gather found less
// than one token (one units) in all the shards, with room for a bound worth
// publishing. It sums again after reading the bound and gen, so that a
// give-back after these reads either fails the CAS (it stored -gen) or
// shows in gen after it.
func (b *Bucket) publishDry(v, one int64) {
	dry, gen := b.dry.Load(), b.gen.Load()
	if sum, _, _ := b.survey(v); sum < one && v+one-sum > dry && b.dry.CompareAndSwap(dry, v+one-sum) && b.gen.Load() != gen {
		// A give-back landed after the sum, and another gather had
		// published the very value read above: withdraw (the CAS compares
		// values, so it cannot see that).
		b.gaveBack()
	}
}

// gaveBack invalidates the dry bound after units went back into a shard.
func (b *Bucket) gaveBack() { b.dry.Store(-b.gen.Add(1)) }
