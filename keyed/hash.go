package keyed

import (
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"unsafe"
)

// hasher is a Limiter's hash of a key's form. Its high bits pick the shard,
// the next the key's home in the shard's table, its low byte the key's tag
// (see table). Both ways of hashing are seeded with secrets New draws at
// random, which never leave the limiter, so that no client can choose keys
// that collide (and lengthen probe runs, or share tags) without them.
type hasher struct {
	seed maphash.Seed // forms of more than 16 bytes
	k    [4]uint64    // forms of up to 16 bytes
}

func newHasher() hasher {
	h := hasher{seed: maphash.MakeSeed()}
	for i := range h.k {
		h.k[i] = rand.Uint64() // xored into the multiplied words: any value serves
	}
	return h
}

// sum returns form's hash. A form of up to 16 bytes (IP addresses, most
// IDs: the usual key) is hashed here, from its first and last eight bytes
// (four, or its bytes, when shorter) and its length, by two 64×64→128-bit
// multiplies of those words with the secrets, each folded by xoring its
// halves: a few instructions and no call, where maphash's three calls
// were a sixth of a held key's call. Longer forms go to maphash.
func (h *hasher) sum(form string) uint64 {
	n := len(form)
	if n > 16 {
		return maphash.String(h.seed, form)
	}
	var a, b uint64
	p := unsafe.StringData(form)
	switch {
	case n >= 8:
		a, b = word(p, 0), word(p, n-8)
	case n >= 4:
		a, b = uint64(word32(p, 0)), uint64(word32(p, n-4))
	case n > 0:
		s := unsafe.Slice(p, n)
		a = uint64(s[0])<<16 | uint64(s[n>>1])<<8 | uint64(s[n-1])
	}
	hi, lo := bits.Mul64(a^h.k[0], b^h.k[1])
	hi, lo = bits.Mul64(hi^h.k[2], lo^uint64(n)^h.k[3])
	return hi ^ lo
}
