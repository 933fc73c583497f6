package keyed

import (
	"crypto/sha256"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestHashSpread: the short-key hash spreads families of keys that differ
// little (sequential IDs, dotted IPv4 addresses, random keys of every length
// up to 16 bytes, keys that differ in one byte anywhere) over the shards
// (the top 8 bits), the tags (the low byte) and the homes (the bits below
// the shard's), evenly, with no 64-bit collision; and every byte of a key
// of up to 16 bytes, and its length, changes its hash.
func TestHashSpread(t *testing.T) {
	h := newHasher()
	rng := rand.New(rand.NewPCG(3, 4))
	families := map[string][]string{}
	for i := range 1 << 18 {
		families["sequential"] = append(families["sequential"], fmt.Sprintf("key-%012d", i))
		families["ipv4"] = append(families["ipv4"], fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255))
		b := make([]byte, 1+rng.IntN(16))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		families["random"] = append(families["random"], string(b))
	}
	for name, keys := range families {
		seen := map[string]bool{}
		sums := map[uint64]bool{}
		var top, tag, mid [256]int
		n := 0
		for _, k := range keys {
			if seen[k] {
				continue
			}
			seen[k] = true
			s := h.sum(k)
			if sums[s] {
				t.Fatalf("%s: a 64-bit collision at %q", name, k)
			}
			sums[s] = true
			top[s>>56]++
			tag[s&0xff]++
			mid[s>>48&0xff]++
			n++
		}
		for what, counts := range map[string]*[256]int{"shard": &top, "tag": &tag, "home": &mid} {
			mean := float64(n) / 256
			for v, c := range counts {
				if math.Abs(float64(c)-mean) > 6*math.Sqrt(mean) {
					t.Fatalf("%s: %s %d holds %d of %d keys, mean %.0f", name, what, v, c, n, mean)
				}
			}
		}
	}
	// Every byte and the length count.
	base := []byte("0123456789abcdef")
	for n := 0; n <= 16; n++ {
		k := string(base[:n])
		if n > 0 && h.sum(k) == h.sum(string(base[:n-1])) {
			t.Fatalf("%q and %q hash alike", k, base[:n-1])
		}
		for j := range n {
			b := []byte(k)
			b[j] ^= 0x20
			if h.sum(k) == h.sum(string(b)) {
				t.Fatalf("%q and %q hash alike", k, b)
			}
		}
	}
}

// TestSecretsUnconstrained: the short-key hash's secrets are drawn whole,
// with no bit fixed (an odd factor was forced once, which told a client
// the low bit of each secret and served nothing: they are xored into the
// multiplied words, not multiplied).
func TestSecretsUnconstrained(t *testing.T) {
	var or, and uint64 = 0, ^uint64(0)
	for range 64 {
		h := newHasher()
		for _, k := range h.k {
			or |= k
			and &= k
		}
	}
	if or != ^uint64(0) || and != 0 {
		t.Fatalf("bits fixed in every secret: always set %#x, never set %#x", and, ^or)
	}
}

// TestDigest: a key over 64 bytes is held as the first 16 bytes of
// SHA-256(secret ‖ SHA-256(key)), computed here with crypto/sha256 alone;
// the secret is the limiter's own (two limiters digest a key differently);
// computing it allocates nothing.
func TestDigest(t *testing.T) {
	l1, err := New(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := New(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{65, 100, 1000, 1 << 20} {
		key := strings.Repeat("k", n)
		inner := sha256.Sum256([]byte(key))
		want := sha256.Sum256(append(append([]byte(nil), l1.dsecret[:]...), inner[:]...))
		var buf, buf2 [digestBytes]byte
		if got := l1.form(key, &buf); got != string(want[:digestBytes]) {
			t.Fatalf("%d bytes: digest %x, want %x", n, got, want[:digestBytes])
		}
		if l1.form(key, &buf) == l2.form(key, &buf2) {
			t.Fatalf("%d bytes: two limiters share a digest: their secrets are not their own", n)
		}
		if a := testing.AllocsPerRun(100, func() { l1.form(key, &buf) }); a != 0 {
			t.Fatalf("%d bytes: %v allocations a digest", n, a)
		}
	}
	if short := strings.Repeat("k", maxKeyBytes); l1.form(short, new([digestBytes]byte)) != short {
		t.Fatal("a key of maxKeyBytes is not held as itself")
	}
}
