package config

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ReadDir reads every regular file under dir, recursively, in lexical
// order of path, as envoyproxy/ratelimit's runtime loader takes every file
// of its directory; with ignoreDotFiles, names starting with "." are
// skipped (RUNTIME_IGNOREDOTFILES). A File's Name is its path relative to
// dir. Symbolic links to files are followed; links to directories are not.
//
// Names starting with ".." are always skipped: they are Kubernetes'. A
// ConfigMap mounted as a volume holds its files in a timestamped
// "..2026_12_01_..." directory, a "..data" link to it, and one link per
// file into "..data"; reading the timestamped copy too would load every
// file twice (envoyproxy/ratelimit needs RUNTIME_IGNOREDOTFILES=true
// there). Kubernetes swaps "..data" atomically, but each file is read
// through its own link, so a swap between two reads would mix the old
// files with the new: ReadDir reads the targets of every "..data" link
// before and after reading the files, and reads again if any changed, so
// that it returns the old files or the new ones, never a mix (an error if
// they changed during each of readTries reads). dir itself may be a link
// (envoyproxy/ratelimit's RUNTIME_ROOT is /srv/runtime_data/current, whose
// swap reloads): each read resolves it once and reads the directory it
// names, and reads again if it names another one afterwards.
func ReadDir(dir string, ignoreDotFiles bool) ([]File, error) {
	for range readTries {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return nil, err
		}
		before, err := dataLinks(real, ignoreDotFiles)
		if err != nil {
			return nil, err
		}
		files, rerr := readFiles(real, ignoreDotFiles)
		after, err := dataLinks(real, ignoreDotFiles)
		if err != nil {
			return nil, err
		}
		again, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return nil, err
		}
		if again == real && maps.Equal(before, after) {
			return files, rerr
		}
	}
	return nil, fmt.Errorf("config: %s, or a ..data link under it, changed during each of %d reads", dir, readTries)
}

// readTries bounds ReadDir's reads of a directory whose ..data links keep
// changing.
const readTries = 10

// testHookRead, if set (by tests), is called after each file readFiles
// reads.
var testHookRead func(path string)

// dataLinks returns the target of every "..data" link under dir, by path,
// in the directories readFiles reads.
func dataLinks(dir string, ignoreDotFiles bool) (map[string]string, error) {
	links := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == dir {
			return nil
		}
		if d.Name() == "..data" && d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			links[path] = target
			return nil
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), "..") || ignoreDotFiles && strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir // as readFiles skips it
		}
		return nil
	})
	return links, err
}

// readFiles is ReadDir's reading walk.
func readFiles(dir string, ignoreDotFiles bool) ([]File, error) {
	var files []File
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir && (strings.HasPrefix(d.Name(), "..") || ignoreDotFiles && strings.HasPrefix(d.Name(), ".")) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		info, err := os.Stat(path)
		if err != nil || !info.Mode().IsRegular() {
			return nil // a dangling or non-file link: not a configuration file
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if testHookRead != nil {
			testHookRead(path)
		}
		rel, _ := filepath.Rel(dir, path)
		files = append(files, File{Name: rel, Content: b})
		return nil
	})
	return files, err
}

// Watcher polls a directory and applies each new valid configuration.
type Watcher struct {
	Dir            string
	IgnoreDotFiles bool
	Merge          bool
	// Interval between polls; a change applies within it (plus the read).
	Interval time.Duration
	// Check, if not nil, vets a configuration that loads; an error refuses
	// it like a load error.
	Check func(*Config) error
	// Apply receives each configuration that differs from the last one seen
	// and loads.
	Apply func(*Config)
	// Fail receives each changed content that does not load (or a read
	// error); the configuration in force stays.
	Fail func(error)
}

// Run polls until ctx ends. The first poll happens after one Interval; load
// the initial configuration with ReadDir and Load before calling it. A
// content that failed is reported once, not at every poll, until it changes.
func (w *Watcher) Run(ctx context.Context, initial []File) {
	last := digest(initial)
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		files, err := ReadDir(w.Dir, w.IgnoreDotFiles)
		if err != nil {
			if last != [32]byte{} {
				w.Fail(err)
			}
			last = [32]byte{}
			continue
		}
		d := digest(files)
		if d == last {
			continue
		}
		last = d
		c, err := Load(files, w.Merge)
		if err == nil && w.Check != nil {
			err = w.Check(c)
		}
		if err != nil {
			w.Fail(err)
			continue
		}
		w.Apply(c)
	}
}

// digest identifies a set of files by names and contents.
func digest(files []File) [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		binary.LittleEndian.PutUint64(n[:], uint64(len(f.Name)))
		h.Write(n[:])
		h.Write([]byte(f.Name))
		binary.LittleEndian.PutUint64(n[:], uint64(len(f.Content)))
		h.Write(n[:])
		h.Write(f.Content)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}
