package keyed

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestGroup checks the tag-word arithmetic against a byte-by-byte
// reference, on random words and on the patterns that break the usual
// zero-byte trick (a 0x00 byte before a 0x01 or a 0x80, runs of equal
// bytes): group's flags are exactly the slots at or after off that hold
// the tag before the first empty one, and firstZero's lowest flag is the
// first empty byte.
func TestGroup(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bytesOf := []uint64{0x00, 0x01, 0x7f, 0x80, 0x81, 0xfe, 0xff}
	check := func(w, tag, off uint64) {
		t.Helper()
		var want uint64
		end := false
		for j := off; j < 8; j++ {
			b := w >> (j * 8) & 0xff
			if b == 0 {
				end = true
				break
			}
			if b == tag {
				want |= 0x80 << (j * 8)
			}
		}
		match, gotEnd := group(w, tag, off)
		if match != want || gotEnd != end {
			t.Fatalf("group(%#016x, %#02x, %d) = %#016x, %v; want %#016x, %v", w, tag, off, match, gotEnd, want, end)
		}
		first := 64
		for j := range 8 {
			if w>>(j*8)&0xff == 0 {
				first = j*8 + 7
				break
			}
		}
		if got := bits.TrailingZeros64(firstZero(w)); got != first {
			t.Fatalf("firstZero(%#016x): lowest flag at bit %d, want %d", w, got, first)
		}
	}
	for range 200_000 {
		var w uint64
		for j := range 8 {
			b := rng.Uint64() & 0xff
			if rng.IntN(2) == 0 {
				b = bytesOf[rng.IntN(len(bytesOf))]
			}
			w |= b << (j * 8)
		}
		tag := tagOf(rng.Uint64())
		if rng.IntN(3) == 0 {
			tag = w >> (rng.IntN(8) * 8) & 0xff // a tag the word holds
			if tag == 0 {
				tag = 1
			}
		}
		check(w, tag, rng.Uint64N(8))
	}
	for h := range uint64(256) {
		if tagOf(h) == 0 || tagOf(h) > 0xff || (h != 0 && tagOf(h) != h) {
			t.Fatalf("tagOf(%d) = %d", h, tagOf(h))
		}
	}
}

// TestNextSize: every size is 8·2^k or 12·2^k, a multiple of 8, growing by
// 3/2 or 4/3 (2 from the first), so a table's load after a grow is at least
// 3/4 ÷ 3/2 = 1/2 (3/8 only for the first grow).
func TestNextSize(t *testing.T) {
	n := uint64(minSlots)
	for range 60 {
		m := nextSize(n)
		if m%8 != 0 || m <= n || (n >= 16 && 2*m > 3*n) {
			t.Fatalf("nextSize(%d) = %d", n, m)
		}
		if k := m >> bits.TrailingZeros64(m); k != 1 && k != 3 {
			t.Fatalf("nextSize(%d) = %d: not 8·2^k nor 12·2^k", n, m)
		}
		if m > 1<<62 {
			break
		}
		n = m
	}
}

// TestTableModel drives a table through random insertions and removals with
// hashes drawn from a few values (long runs, wrap-around at the end of the
// array, shared tags, homes in the last group), beside a map, at several
// sizes. After every step: each held key is found, and found from its home
// without crossing an empty slot; each removed key is not; every slot's tag
// is 0 exactly when the slot is empty and is its entry's tag otherwise.
func TestTableModel(t *testing.T) {
	for _, n := range []uint64{8, 16, 24, 48, 96} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(n, 7))
			tb := newTable(n)
			hashes := map[*entry][2]uint64{}
			hash := func(e *entry) (uint64, uint64) { h := hashes[e]; return h[0], h[1] }
			held := map[string]*entry{}
			var names []string
			for i := range 3 * n {
				names = append(names, fmt.Sprint("k", i))
			}
			// A few homes (the last slot's among them) and a few tags.
			homes := []uint64{0, n - 1, n / 2, n - 3}
			hxOf := map[string]uint64{}
			tagOfKey := map[string]uint64{}
			for _, k := range names {
				// hx such that home(hx, n) is one of homes: the start of
				// that slot's share of the 64-bit range.
				i := homes[rng.IntN(len(homes))]
				hx, _ := bits.Div64(i, 0, n)
				hx++
				if home(hx, n) != i {
					t.Fatalf("home(%#x, %d) = %d, want %d", hx, n, home(hx, n), i)
				}
				hxOf[k] = hx
				tagOfKey[k] = uint64(1 + rng.IntN(3))
			}
			for step := range 2000 {
				k := names[rng.IntN(len(names))]
				if e, ok := held[k]; ok {
					tb.remove(tb.slot(hxOf[k], e), hash)
					delete(held, k)
				} else if uint64(len(held)) < n-1 {
					e := &entry{key: k}
					hashes[e] = [2]uint64{hxOf[k], tagOfKey[k]}
					tb.put(hxOf[k], tagOfKey[k], e)
					held[k] = e
				}
				for i := range n {
					e := tb.slots[i].Load()
					switch tag := tb.tag(i); {
					case e == nil && tag != 0, e != nil && tag != tagOfKey[e.key]:
						t.Fatalf("step %d: slot %d holds %v with tag %d", step, i, e, tag)
					}
				}
				for _, k := range names {
					got := tb.find(hxOf[k], tagOfKey[k], k, nil)
					if want := held[k]; got != want {
						t.Fatalf("step %d: find(%q) = %v, want %v", step, k, got, want)
					}
					if e := held[k]; e != nil {
						for i := home(hxOf[k], n); tb.slots[i].Load() != e; i = next(i, n) {
							if tb.slots[i].Load() == nil {
								t.Fatalf("step %d: %q is past an empty slot %d", step, k, i)
							}
						}
					}
				}
			}
		})
	}
}

// TestSameShort: sameShort agrees with == on keys of 8 to 16 bytes that
// differ in any one byte, or not at all, at any alignment.
func TestSameShort(t *testing.T) {
	buf := []byte("0123456789abcdefghijklmnopqrstuvwxyz0123456789")
	for n := 8; n <= 16; n++ {
		for off := range 8 {
			a := string(buf[off : off+n])
			for j := range n {
				for _, c := range []byte{0, 1, 0x80, 0xff, a[j] ^ 1} {
					b := []byte(a)
					b[j] = c
					if got, want := sameShort(a, string(b)), a == string(b); got != want {
						t.Fatalf("sameShort(%q, %q) = %v", a, b, got)
					}
				}
			}
			if !sameShort(a, string(buf[off+8 : off+8+n][:0])+a) {
				t.Fatalf("sameShort(%q, itself) = false", a)
			}
		}
	}
}
