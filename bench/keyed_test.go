package bench

import "testing"

// TestKeyedAdapters checks that every per-key adapter gives a new key its
// capacity and then rejects, independently of other keys, with the
// benchmark's own parameters as well: a peer that rejected them, or
// clamped them into a different workload, would fail here rather than skew
// a table. A rate of 1e-3/s adds nothing while the test runs.
func TestKeyedAdapters(t *testing.T) {
	if KeyedImpls[0].Name != "keyed" {
		t.Fatalf("KeyedImpls[0] = %s: this module's limiter comes first", KeyedImpls[0].Name)
	}
	for _, im := range KeyedImpls {
		t.Run(im.Name, func(t *testing.T) {
			l, closer, err := im.New(3, 1e-3, 100)
			if err != nil {
				t.Fatal(err)
			}
			if closer != nil {
				defer closer.Close()
			}
			for _, key := range []string{"a", "b", ""} {
				for i := range 3 {
					if !l.Allow(key) {
						t.Fatalf("Allow(%q) #%d on a new key of capacity 3 = false", key, i+1)
					}
				}
				if l.Allow(key) {
					t.Fatalf("Allow(%q) on a drained key = true", key)
				}
			}
			b, bcloser, err := im.New(keyedCapacity, keyedRate, 10)
			if err != nil {
				t.Fatal(err)
			}
			if bcloser != nil {
				defer bcloser.Close()
			}
			for i := range 1000 {
				if !b.Allow(benchKeys(10)[i%10]) {
					t.Fatalf("the benchmark's workload rejected call %d", i)
				}
			}
		})
	}
}

// TestWalkVisitsEveryKey checks the benchmarks' Walk in both directions,
// from an offset and across the wrap: on a limiter whose keys hold one
// token each, a turn of len(keys) calls admits every key exactly once (a
// key visited twice, or one skipped, would show as a refusal or as too few
// admissions), and a call past the turn revisits a drained key. Two calls
// from key 0 show the direction: even goroutines go on to key 1, odd ones
// wrap back to the last key.
func TestWalkVisitsEveryKey(t *testing.T) {
	keys := benchKeys(37)
	im, _ := LookupKeyed("keyed")
	for g := range 2 {
		l, _, err := im.New(1, 1e-3, 2*len(keys))
		if err != nil {
			t.Fatal(err)
		}
		Walk(l, keys, g, 0, 2)
		next, other := keys[1], keys[len(keys)-1]
		if g%2 == 1 {
			next, other = other, next
		}
		if l.Allow(next) || !l.Allow(other) {
			t.Errorf("goroutine %d: two calls from key 0 did not go on to %q alone", g, next)
		}
		for _, from := range []int{0, 5, len(keys) - 1} {
			l, _, err := im.New(1, 1e-3, 2*len(keys))
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := Walk(l, keys, g, from, len(keys)); got != int64(len(keys)) {
				t.Errorf("goroutine %d from %d: a turn admitted %d of %d keys", g, from, got, len(keys))
			}
			if got, _ := Walk(l, keys, g, from, 1); got != 0 {
				t.Errorf("goroutine %d from %d: a call past the turn admitted %d", g, from, got)
			}
		}
	}
}
