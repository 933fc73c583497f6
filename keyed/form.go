package keyed

import (
	"encoding/binary"
	"hash/maphash"
	"unsafe"
)

// maxKeyBytes is the longest key the limiter holds as its own bytes. A
// longer key (a client may send a megabyte in a header) is held as its
// digest instead, so that a held key costs at most maxKeyBytes bytes of
// key, whatever the caller passes.
const maxKeyBytes = 64

// digestBytes is the size of a long key's digest: two 64-bit maphash sums
// of the key under two secret seeds drawn at random by New.
const digestBytes = 16

// form returns what the limiter holds and compares for key: key itself
// when it has at most maxKeyBytes bytes, otherwise its digest, written
// into buf. Two long keys share a bucket only if both of their 64-bit
// hashes under independent secret seeds collide (about 2^-128 for a given
// pair; no client can aim at it without the seeds, which never leave the
// limiter), and a short key of 16 bytes shares one with a long key only if
// it equals that digest, which is as unlikely. Every path that hashes,
// looks up or stores a key uses its form, so the table never sees the long
// key itself.
func (l *Limiter) form(key string, buf *[digestBytes]byte) string {
	if len(key) <= maxKeyBytes {
		return key
	}
	return l.digest(key, buf)
}

// digest writes key's digest into buf and returns it as a string.
func (l *Limiter) digest(key string, buf *[digestBytes]byte) string {
	binary.LittleEndian.PutUint64(buf[:8], maphash.String(l.dseed[0], key))
	binary.LittleEndian.PutUint64(buf[8:], maphash.String(l.dseed[1], key))
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
