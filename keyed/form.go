package keyed

import (
	"crypto/sha256"
	"unsafe"
)

// maxKeyBytes is the longest key the limiter holds as its own bytes. A
// longer key (a client may send a megabyte in a header) is held as its
// digest instead, so that a held key costs at most maxKeyBytes bytes of
// key, whatever the caller passes.
const maxKeyBytes = 64

// digestBytes is the size of a long key's digest (see digest).
const digestBytes = 16

// form returns what the limiter holds and compares for key: key itself
// when it has at most maxKeyBytes bytes, otherwise its digest, written
// into buf. Every path that hashes, looks up or stores a key uses its
// form, so the table never sees the long key itself.
func (l *Limiter) form(key string, buf *[digestBytes]byte) string {
	if len(key) <= maxKeyBytes {
		return key
	}
	return l.digest(key, buf)
}

// digest writes key's digest into buf and returns it as a string: the
// first 16 bytes of SHA-256(secret ‖ SHA-256(key)), secret 16 random bytes
// New draws from crypto/rand, which never leave the limiter.
//
// Two long keys share a bucket only if their digests are equal: either
// their SHA-256 sums are (a SHA-256 collision, which no one knows how to
// find), or the outer hash maps two distinct sums to the same 128 bits.
// The outer hash is one call of SHA-256's compression function on a block
// that holds the secret and the sum; taking that function to be
// pseudorandom when keyed through part of its block (the assumption
// HMAC's proof rests on), that is a chance of 2^-128 a pair to anyone
// without the secret: with q long keys held at once, under q²/2^129
// (2^-89 at 2^20 keys). A key of 16 bytes shares a bucket with a long key
// only if it equals that key's digest, 2^-128 likewise. No client can aim
// at either: no digest ever leaves the limiter. (The previous digest, two
// maphash sums under two seeds, shared the runtime's per-process hash key
// between them, and maphash states no bound.) SHA-256 of the secret and
// the key in one pass would save the outer block, but its bound grows
// with the key's length.
//
// The cost, on calls with keys over 64 bytes only: a held key's Allow
// takes about 260 ns with a key of 65 to 100 bytes (61 with the maphash
// digest) and 820 with one of 1000 bytes (250), on the project's machine
// with the CPU's SHA extensions (BenchmarkAllowLongKey). It allocates
// nothing: the outer input is a stack array and the inner sum reads the
// key in place.
func (l *Limiter) digest(key string, buf *[digestBytes]byte) string {
	var in [16 + sha256.Size]byte
	copy(in[:16], l.dsecret[:])
	*(*[sha256.Size]byte)(in[16:]) = sha256.Sum256(unsafe.Slice(unsafe.StringData(key), len(key)))
	out := sha256.Sum256(in[:])
	copy(buf[:], out[:digestBytes])
	return unsafe.String(&buf[0], digestBytes)
}

// maxBytesPerKey bounds the heap bytes one held single-limit key costs
// once its shard has grown past its first table: its entry with its key's
// form in one allocation (32 + at most maxKeyBytes: the 96-byte size
// class) and its share of its shard's table (9-byte slots at a load of at
// least 3/8 after a grow: at most 24 bytes, the allocator's rounding
// included).
const maxBytesPerKey = 120

// maxBytesPerShard bounds what a shard costs besides its keys' shares: its
// lock, counters and hand (128 bytes, padded), its view (32), all made by
// New, and its first table once it holds a key (a 56-byte table in the
// 64-byte class, 8 slots of 8 bytes and a tag word: 136), which a grow
// replaces by one the keys' shares pay for.
const maxBytesPerShard = 128 + 32 + 136
