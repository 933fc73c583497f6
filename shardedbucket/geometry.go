package shardedbucket

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// shard is one cache line: z is written by admissions, cap and off are
// read-only and ride along on the same line for free. aside, seen, lostUntil
// and runFrom belong to the shard as a home rather than as a store of tokens
// (see central.go's "Standing aside"): dry calls that start at the shard
// write them, normally its own processor's alone, but several processors'
// where shards are fewer than processors or a goroutine migrates, and a
// collapse clears them; a call still inside takeCentral when a step runs
// may write them after it. None of that matters to the bound: every stand
// is decided on its own call's reading and central word, so shared or stale
// writes change only who is refused when.
type shard struct {
	z         atomic.Int64                                          // empty point on this shard's stream: balance = min(cap, V_i(now) - z)
	cap       int64                                                 // this shard's capacity in units; immutable
	off       int64                                                 // (shards-1-i) << blockShift: see geometry.vi; immutable
	aside     atomic.Int64                                          // stream value before which a dry call from this home refuses without loading c; odd if the stand followed a lost race
	seen      atomic.Int64                                          // c as this home's calls last left or found it, while lostUntil holds
	lostUntil atomic.Int64                                          // stream value until which this home counts c's moves by others as lost races
	runFrom   atomic.Int64                                          // c when this home's run began: at the collapse, its last stand or its last turn's check
	_         [max(unsafe.Sizeof(cpu.CacheLinePad{}), 56) - 56]byte // to a line; nothing where the pad is empty (js/wasm)
}

// geometry is how the refill stream is dealt to the shards: in blocks of one
// token, shard i receiving block β when β mod shards == i. Where a shard
// holds less than four tokens the blocks are smaller, at most a quarter of a
// shard's capacity: a reservation takes from each shard at most its
// capacity, and with blocks that large a shard's share of a long
// reservation could exceed it by a block (see Bucket's Fairness). Immutable.
type geometry struct {
	block      int64 // units in a block: one token
	blockShift uint  // log2(block)
	roundShift uint  // log2(block * shards)
	roundMask  int64 // block*shards - 1
	last       int64 // (shards-1) * block: where a round's last block starts
}

// vi is shard s's stream at bucket-wide stream value v: the units u < v
// whose block is s's. It is monotone in v and the shards' sum to v exactly.
// Shifted by s.off, shard i's blocks are the last of each round, so it
// counts the whole rounds below x = v + s.off and the part of x's round
// past its last block's start (the shift adds none: s.off is below it).
func (g *geometry) vi(s *shard, v int64) int64 {
	if g.roundShift == 0 {
		return v // one shard, dealt single units: its stream is the bucket's
	}
	x := v + s.off
	return (x>>g.roundShift)<<g.blockShift + max((x&g.roundMask)-g.last, 0)
}

// state returns the shard's balance for the bucket-wide stream value v
// (below zero while reservations wait), the z to swap out, and the clamped z
// to build on: units beyond cap are discarded by moving z up to vi - cap.
func (s *shard) state(v int64, g *geometry) (bal, z, base int64) {
	vi := g.vi(s, v)
	z = s.z.Load()
	base = max(z, vi-s.cap)
	return vi - base, z, base
}

// soonest returns a function from rank to position (index from start): the
// rank-th position is the shard that receives the rank-th next unit of the
// refill stream after v: the shard of v's block first, then the shards of
// the blocks after it, in turn, so each rank names exactly one shard.
func (b *Bucket) soonest(v int64, start uint) func(rank int) int {
	return func(rank int) int {
		return int((uint(v>>b.g.blockShift) + uint(rank) - start) & b.mask)
	}
}
