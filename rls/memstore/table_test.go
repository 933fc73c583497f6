package memstore

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// tableOps drives a table from bytes against a map: inserts of absent
// digests, removals and lookups, with digests drawn from a small set (so
// that they collide and cluster) and homes crowded into a few slots, and
// checks after every step that the table holds exactly the map's entries,
// each reachable from its home with no empty slot between, within its
// load factor and never above its largest size.
func tableOps(t *testing.T, data []byte) {
	const maxSlots = 40
	tb := newTable(maxSlots)
	model := map[digest]int64{}
	for len(data) >= 2 {
		op, v := data[0], data[1]
		data = data[2:]
		// dg[1] picks the home: its top bits, so few distinct values
		// crowd the homes; v's low bits make the digest distinct.
		dg := digest{uint64(v) + 1, uint64(v>>4) << 60}
		i := tb.find(dg)
		_, in := model[dg]
		if (i >= 0) != in {
			t.Fatalf("find(%v) = %d, model has it: %v", dg, i, in)
		}
		switch {
		case op&1 == 0 && !in && len(model) < maxSlots*loadNum/loadDen:
			tb.insert(dg, bucket{d: int64(op)})
			model[dg] = int64(op)
		case op&1 == 1 && in:
			tb.remove(i)
			delete(model, dg)
		case in:
			if tb.vals[i].d != model[dg] {
				t.Fatalf("value of %v: %d, want %d", dg, tb.vals[i].d, model[dg])
			}
		}
		checkTable(t, &tb, model, maxSlots)
	}
}

func checkTable(t *testing.T, tb *table, model map[digest]int64, maxSlots int) {
	t.Helper()
	if tb.n != len(model) {
		t.Fatalf("n = %d, model %d", tb.n, len(model))
	}
	if len(tb.keys) > maxSlots || tb.n*loadDen > len(tb.keys)*loadNum {
		t.Fatalf("%d entries in %d slots (largest %d)", tb.n, len(tb.keys), maxSlots)
	}
	seen := 0
	for i, k := range tb.keys {
		if k == (digest{}) {
			if tb.vals[i] != (bucket{}) {
				t.Fatalf("empty slot %d keeps a bucket", i)
			}
			continue
		}
		seen++
		if d, ok := model[k]; !ok || tb.vals[i].d != d {
			t.Fatalf("slot %d holds %v (%d), model %d %v", i, k, tb.vals[i].d, d, ok)
		}
		for j := tb.home(k); j != i; j = tb.next(j) {
			if tb.keys[j] == (digest{}) {
				t.Fatalf("%v at %d is cut off from its home %d by an empty slot at %d", k, i, tb.home(k), j)
			}
		}
	}
	if seen != tb.n {
		t.Fatalf("%d live slots, n = %d", seen, tb.n)
	}
}

func TestTable(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	data := make([]byte, 2*20000)
	for i := 0; i < len(data); i += 8 {
		binary.LittleEndian.PutUint64(data[i:], rnd.Uint64())
	}
	tableOps(t, data)
}

func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 0, 17, 0, 33, 1, 1, 0, 49, 1, 17})
	f.Fuzz(tableOps)
}

// TestTableBound: a table never grows past its largest size however many
// entries come and go while it holds its bound.
func TestTableBound(t *testing.T) {
	const bound = 100
	tb := newTable(slotsFor(bound))
	rnd := rand.New(rand.NewPCG(7, 8))
	var live []digest
	for range 200000 {
		if len(live) == bound {
			j := rnd.IntN(len(live))
			tb.remove(tb.find(live[j]))
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
		}
		dg := digest{rnd.Uint64() | 1, rnd.Uint64()}
		tb.insert(dg, bucket{})
		live = append(live, dg)
	}
	if len(tb.keys) != slotsFor(bound) {
		t.Fatalf("%d slots for a bound of %d, want %d", len(tb.keys), bound, slotsFor(bound))
	}
	for _, dg := range live {
		if tb.find(dg) < 0 {
			t.Fatalf("lost %v", dg)
		}
	}
}
