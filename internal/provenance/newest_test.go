package provenance

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestNewest: the newest result is the one with the latest date in its
// name, not the one modified last (after a clone every file has the
// checkout's time, and an old result edited later must not be taken for
// the latest run); within one date the later modified wins; benchstat
// tables and other benchmarks' files that share a prefix are never picked.
func TestNewest(t *testing.T) {
	type file struct {
		name string
		age  time.Duration
	}
	for _, tc := range []struct {
		re    *regexp.Regexp
		files []file
		want  string
	}{
		{FullResult, []file{
			{"2026-12-07-vm-995f156.txt", 3 * time.Hour},
			{"2026-12-07-vm-65fd094.txt", 2 * time.Hour},
			{"2026-12-01-vm-03d34e3.txt", 0}, // the oldest run, touched last
			{"2026-12-09-vm-1234567-benchstat.txt", 0},
			{"2026-12-09-vm-1234567-rate.txt", 0},
		}, "2026-12-07-vm-65fd094.txt"},
		{RedisResult, []file{
			{"redis-2026-12-01-vm-d54b607.txt", 2 * time.Hour},
			{"redis-2026-12-01-vm-657d6b2.txt", time.Hour},
			{"redis-2025-11-30-vm-0000000.txt", 0}, // an older run, touched last
			{"redis-servercost-2026-12-06-vm-be2e030.txt", 0},
			{"redis-decision-2026-12-02-vm-73737a7-benchstat.txt", 0},
		}, "redis-2026-12-01-vm-657d6b2.txt"},
	} {
		dir := t.TempDir()
		now := time.Now()
		for _, f := range tc.files {
			p := filepath.Join(dir, f.name)
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, now.Add(-f.age), now.Add(-f.age)); err != nil {
				t.Fatal(err)
			}
		}
		got, err := Newest(dir, tc.re)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(dir, tc.want); got != want {
			t.Errorf("Newest(%s) = %s, want %s", tc.re, got, want)
		}
		if _, err := Newest(t.TempDir(), tc.re); err == nil {
			t.Errorf("Newest(%s) of an empty directory: no error", tc.re)
		}
	}
}
