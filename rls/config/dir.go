package config

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
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
	return read(dir, ignoreDotFiles, false)
}

// ReadRuntime is ReadDir, plus the files beside dir that
// envoyproxy/ratelimit's runtime loader also takes under its default
// RUNTIME_WATCH_ROOT=true. That loader reads every file under
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY, names it by its path there with "/"
// read as ".", and keeps the names that start with RUNTIME_APPDIRECTORY
// and a dot: the files of dir ("config/a.yaml"), and those of dir's parent
// whose name starts with dir's name and a dot, a file ("config.yaml", one
// file mounted with subPath beside an absent config directory) or a
// directory, read recursively ("config.d/x.yaml"). Those are read here
// too, after dir's files, named by their path relative to dir
// ("../config.yaml"); links to directories among them are not followed,
// as that loader does not follow them. dir may be absent when such a file
// exists. With RUNTIME_WATCH_ROOT=false that loader reads dir only, as
// ReadDir does.
func ReadRuntime(dir string, ignoreDotFiles bool) ([]File, error) {
	return read(dir, ignoreDotFiles, true)
}

func read(dir string, ignoreDotFiles, beside bool) ([]File, error) {
	base := filepath.Base(dir)
	for range readTries {
		real, err := filepath.EvalSymlinks(dir)
		missing := beside && errors.Is(err, fs.ErrNotExist)
		if err != nil && !missing {
			return nil, err
		}
		dirErr := err
		var parent string
		if beside {
			if parent, err = filepath.EvalSymlinks(filepath.Dir(dir)); err != nil {
				return nil, err
			}
		}
		before, err := allLinks(real, parent, base, ignoreDotFiles)
		if err != nil {
			return nil, err
		}
		var files []File
		var rerr error
		if real != "" {
			files, rerr = readFiles(real, ignoreDotFiles)
		}
		n := len(files)
		if beside && rerr == nil {
			var more []File
			more, rerr = readBeside(parent, base, ignoreDotFiles)
			files = append(files, more...)
		}
		after, err := allLinks(real, parent, base, ignoreDotFiles)
		if err != nil {
			return nil, err
		}
		again, err := filepath.EvalSymlinks(dir)
		if err != nil && !(missing && errors.Is(err, fs.ErrNotExist)) {
			return nil, err
		}
		againParent := ""
		if beside {
			if againParent, err = filepath.EvalSymlinks(filepath.Dir(dir)); err != nil {
				return nil, err
			}
		}
		if again == real && againParent == parent && maps.Equal(before, after) {
			if missing && len(files) == n && rerr == nil {
				return nil, dirErr // neither dir nor a file beside it
			}
			return files, rerr
		}
	}
	return nil, fmt.Errorf("config: %s, or a ..data link under it, changed during each of %d reads", dir, readTries)
}

// allLinks returns dataLinks of dir (when not "") and, when parent is not
// "", the target of parent's own "..data" link and the "..data" links
// under the directories readBeside reads.
func allLinks(dir, parent, base string, ignoreDotFiles bool) (map[string]string, error) {
	links := map[string]string{}
	if dir != "" {
		var err error
		if links, err = dataLinks(dir, ignoreDotFiles); err != nil {
			return nil, err
		}
	}
	if parent == "" {
		return links, nil
	}
	if target, err := os.Readlink(filepath.Join(parent, "..data")); err == nil {
		links[filepath.Join(parent, "..data")] = target
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() || !besideName(e.Name(), base, ignoreDotFiles) {
			continue
		}
		more, err := dataLinks(filepath.Join(parent, e.Name()), ignoreDotFiles)
		if err != nil {
			return nil, err
		}
		maps.Copy(links, more)
	}
	return links, nil
}

// besideName reports whether envoyproxy/ratelimit's runtime loader takes
// the entry name of the config directory's parent, the directory being
// base: its name starts with base and a dot.
func besideName(name, base string, ignoreDotFiles bool) bool {
	return strings.HasPrefix(name, base+".") && !strings.HasPrefix(name, "..") &&
		!(ignoreDotFiles && strings.HasPrefix(name, "."))
}

// readBeside is ReadRuntime's read of the config directory's parent.
func readBeside(parent, base string, ignoreDotFiles bool) ([]File, error) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil, err
	}
	var files []File
	for _, e := range entries {
		name := e.Name()
		if !besideName(name, base, ignoreDotFiles) {
			continue
		}
		path := filepath.Join(parent, name)
		if e.IsDir() { // a directory, not a link to one
			more, err := readFiles(path, ignoreDotFiles)
			if err != nil {
				return nil, err
			}
			for _, f := range more {
				f.Name = filepath.Join("..", name, f.Name)
				files = append(files, f)
			}
			continue
		}
		b, ok, err := readFile(path)
		if err != nil {
			return nil, err
		}
		if ok {
			files = append(files, File{Name: filepath.Join("..", name), Content: b})
		}
	}
	return files, nil
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
		b, ok, err := readFile(path)
		if ok {
			rel, _ := filepath.Rel(dir, path)
			files = append(files, File{Name: rel, Content: b})
		}
		return err
	})
	return files, err
}

// readFile reads the configuration file at path; ok is false for a
// dangling or non-file link, which is not a configuration file.
func readFile(path string) (b []byte, ok bool, err error) {
	info, err := os.Stat(path)
	if err != nil || !info.Mode().IsRegular() {
		return nil, false, nil
	}
	if b, err = os.ReadFile(path); err != nil {
		return nil, false, err
	}
	if testHookRead != nil {
		testHookRead(path)
	}
	return b, true, nil
}

// Watcher polls a directory and applies each new valid configuration.
type Watcher struct {
	Dir            string
	IgnoreDotFiles bool
	// Beside reads with ReadRuntime instead of ReadDir: also the files
	// beside Dir that envoyproxy/ratelimit takes under RUNTIME_WATCH_ROOT.
	Beside bool
	Merge  bool
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
		files, err := read(w.Dir, w.IgnoreDotFiles, w.Beside)
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
