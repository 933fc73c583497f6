package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMedian checks the median the charts draw: the middle value, and the
// mean of the two middle ones for an even count (not the upper of them,
// which would draw every even-count bar above its median).
func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 20}, 15},
	} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

// TestNewest checks that the chart is drawn from the redisbench run with the
// latest date in its name: not from the file modified last (after a clone
// that is any of them), nor from a benchstat table or another benchmark's
// file that also starts with redis-.
func TestNewest(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	write := func(name string, age time.Duration) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	write("redis-2026-12-01-vm-d54b607.txt", 2*time.Hour)
	write("redis-2026-12-01-vm-657d6b2.txt", time.Hour)
	write("redis-2025-11-30-vm-0000000.txt", 0) // older run, touched last
	write("redis-servercost-2026-12-06-vm-be2e030.txt", 0)
	write("redis-decision-2026-12-02-vm-73737a7-benchstat.txt", 0)
	got, err := newest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "redis-2026-12-01-vm-657d6b2.txt"); got != want {
		t.Errorf("newest = %s, want %s", got, want)
	}
}
