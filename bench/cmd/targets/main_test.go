package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestNewestByDate checks that the newest raw result is the one with the
// latest date in its name, not the one modified last: after a clone every
// file has the checkout's time, and an old result edited (or checked out)
// later must not be taken for the latest run. Within one date the later
// modified wins; benchstat tables and other results are never picked.
func TestNewestByDate(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	write := func(name string, age time.Duration) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("BenchmarkX 1 1 ns/op\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	write("2026-12-07-vm-995f156.txt", 3*time.Hour)
	write("2026-12-07-vm-65fd094.txt", 2*time.Hour)
	write("2026-12-01-vm-03d34e3.txt", 0) // the oldest run, touched last
	write("2026-12-09-vm-1234567-benchstat.txt", 0)
	write("2026-12-09-vm-1234567-rate.txt", 0)
	got, err := newest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "2026-12-07-vm-65fd094.txt"); got != want {
		t.Errorf("newest = %s, want %s", got, want)
	}
	if _, err := newest(t.TempDir()); err == nil {
		t.Error("newest of an empty directory: no error")
	}
}
