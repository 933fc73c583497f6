package config_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/admit-go/admit/rls/config"
	"github.com/stretchr/testify/require"
)

// TestReadDirConfigMap reads a Kubernetes ConfigMap's layout: the files are
// links into a "..data" link to a timestamped "..<date>" directory. Each
// file is read once, through its link, whether dot files are ignored
// (RUNTIME_IGNOREDOTFILES) or not: Kubernetes' ".." names are always
// skipped, other dot files only when ignored.
func TestReadDirConfigMap(t *testing.T) {
	dir := t.TempDir()
	stamp := filepath.Join(dir, "..2026_12_01_00_00_00.1")
	require.NoError(t, os.MkdirAll(filepath.Join(stamp, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(stamp, "a.yaml"), []byte("domain: a\n"), 0o644))
	require.NoError(t, os.Symlink(filepath.Base(stamp), filepath.Join(dir, "..data")))
	require.NoError(t, os.Symlink(filepath.Join("..data", "a.yaml"), filepath.Join(dir, "a.yaml")))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "nested"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nested", "b.yaml"), []byte("domain: b\n"), 0o644))

	files, err := config.ReadDir(dir, true)
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	require.Equal(t, []string{"a.yaml", filepath.Join("nested", "b.yaml")}, names)
	c, err := config.Load(files, false)
	require.NoError(t, err)
	require.True(t, c.HasDomain("a"))
	require.True(t, c.HasDomain("b"))

	// Without ignoring dot files, the timestamped directory's copy is
	// still skipped; a dot file of the user's is read.
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".c.yaml"), []byte("domain: c\n"), 0o644))
	files, err = config.ReadDir(dir, false)
	require.NoError(t, err)
	names = nil
	for _, f := range files {
		names = append(names, f.Name)
	}
	require.Equal(t, []string{".c.yaml", "a.yaml", filepath.Join("nested", "b.yaml")}, names)
	c, err = config.Load(files, false)
	require.NoError(t, err)
	require.True(t, c.HasDomain("c"))
}

// TestReadDirConfigMapSwap: Kubernetes swaps a ConfigMap's "..data" link
// to a new timestamped directory between two of ReadDir's file reads.
// ReadDir returns the new files, both of them, never the old first file
// with the new second one.
func TestReadDirConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"..v1", "..v2"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, v), 0o755))
		for _, f := range []string{"a.yaml", "b.yaml"} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, v, f), []byte(v), 0o644))
		}
	}
	require.NoError(t, os.Symlink("..v1", filepath.Join(dir, "..data")))
	for _, f := range []string{"a.yaml", "b.yaml"} {
		require.NoError(t, os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)))
	}
	swapped := false
	config.SetTestHookRead(func(string) {
		if swapped {
			return
		}
		swapped = true
		// As kubelet does: a new link, renamed over the old one.
		require.NoError(t, os.Symlink("..v2", filepath.Join(dir, "..data_tmp")))
		require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	})
	defer config.SetTestHookRead(nil)
	files, err := config.ReadDir(dir, false)
	require.NoError(t, err)
	require.True(t, swapped)
	require.Len(t, files, 2)
	for _, f := range files {
		require.Equal(t, "..v2", string(f.Content), f.Name)
	}
}

// TestReadDirLinkedRoot: the directory may itself be a link, as
// envoyproxy/ratelimit's RUNTIME_ROOT (/srv/runtime_data/current) is, and a
// swap of that link reloads. ReadDir reads through it (it returned no file
// at all before), and a swap between two of its file reads gives the files
// of one version, never a mix.
func TestReadDirLinkedRoot(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, v, "config"), 0o755))
		for _, f := range []string{"a.yaml", "b.yaml"} {
			require.NoError(t, os.WriteFile(filepath.Join(root, v, "config", f), []byte(v), 0o644))
		}
	}
	current := filepath.Join(root, "current")
	require.NoError(t, os.Symlink("v1", current))
	swapped := false
	config.SetTestHookRead(func(string) {
		if !swapped {
			swapped = true
			require.NoError(t, os.Symlink("v2", filepath.Join(root, "next")))
			require.NoError(t, os.Rename(filepath.Join(root, "next"), current))
		}
	})
	defer config.SetTestHookRead(nil)
	files, err := config.ReadDir(filepath.Join(current, "config"), false)
	require.NoError(t, err)
	require.True(t, swapped)
	require.Len(t, files, 2)
	require.Equal(t, "a.yaml", files[0].Name)
	require.Equal(t, string(files[0].Content), string(files[1].Content), "one version")

	files, err = config.ReadDir(current, false)
	require.NoError(t, err)
	require.Len(t, files, 2, "a directory that is a link is read through it")
}

// TestReadDirSkippedDotDirLinks: with dot files ignored, a "..data" link
// in a dot directory (a git-sync checkout's, say) is none of ReadDir's
// concern: its changes do not make ReadDir read again, nor fail it.
func TestReadDirSkippedDotDirLinks(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\n"), 0o644))
	hidden := filepath.Join(dir, ".sync")
	require.NoError(t, os.MkdirAll(filepath.Join(hidden, "x"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(hidden, "y"), 0o755))
	require.NoError(t, os.Symlink("x", filepath.Join(hidden, "..data")))
	n := 0
	config.SetTestHookRead(func(string) {
		// Every read swaps the hidden link.
		n++
		target := []string{"x", "y"}[n%2]
		require.NoError(t, os.Symlink(target, filepath.Join(hidden, "..next")))
		require.NoError(t, os.Rename(filepath.Join(hidden, "..next"), filepath.Join(hidden, "..data")))
	})
	defer config.SetTestHookRead(nil)
	files, err := config.ReadDir(dir, true)
	require.NoError(t, err)
	require.Len(t, files, 1)
	require.Equal(t, 1, n, "one read")
}

// TestReadRuntimeBeside: ReadRuntime takes what envoyproxy/ratelimit's
// runtime loader takes under RUNTIME_WATCH_ROOT=true, the files under
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY whose path there, "/" read as ".",
// starts with "config.": the config directory's files, then a
// config.yaml and a config.d directory beside it (not other.yaml, not
// "configx.yaml", not a link to a directory), even with no config
// directory at all (one file mounted with subPath), and a ConfigMap
// mounted at the parent. Neither the directory nor such a file is the
// directory's absence error, as before.
func TestReadRuntimeBeside(t *testing.T) {
	sub := t.TempDir()
	dir := filepath.Join(sub, "config")
	write := func(rel, content string) {
		p := filepath.Join(sub, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	names := func(files []config.File) []string {
		var ns []string
		for _, f := range files {
			ns = append(ns, f.Name)
		}
		return ns
	}

	_, err := config.ReadRuntime(dir, false)
	require.ErrorIs(t, err, fs.ErrNotExist, "neither the directory nor a file beside it")

	write("config.yaml", "domain: beside\n") // the directory is absent
	write("other.yaml", "domain: other\n")
	write("configx.yaml", "domain: x\n")
	files, err := config.ReadRuntime(dir, false)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join("..", "config.yaml")}, names(files))
	_, err = config.ReadDir(dir, false)
	require.ErrorIs(t, err, fs.ErrNotExist, "ReadDir reads the directory only")

	write("config/a.yaml", "domain: a\n")
	write("config.d/b.yaml", "domain: b\n")
	require.NoError(t, os.MkdirAll(filepath.Join(sub, "elsewhere"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(sub, "elsewhere", "c.yaml"), []byte("domain: c\n"), 0o644))
	require.NoError(t, os.Symlink("elsewhere", filepath.Join(sub, "config.link")))
	files, err = config.ReadRuntime(dir, false)
	require.NoError(t, err)
	require.Equal(t, []string{"a.yaml", filepath.Join("..", "config.d", "b.yaml"), filepath.Join("..", "config.yaml")}, names(files))
	c, err := config.Load(files, false)
	require.NoError(t, err)
	for _, d := range []string{"a", "b", "beside"} {
		require.True(t, c.HasDomain(d), d)
	}
	files, err = config.ReadDir(dir, false)
	require.NoError(t, err)
	require.Equal(t, []string{"a.yaml"}, names(files))

	// A ConfigMap with a config.yaml key mounted at the parent: its
	// timestamped copy is skipped, its link read once.
	cm := t.TempDir()
	stamp := filepath.Join(cm, "..2026_12_01_00_00_00.1")
	require.NoError(t, os.MkdirAll(stamp, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(stamp, "config.yaml"), []byte("domain: cm\n"), 0o644))
	require.NoError(t, os.Symlink(filepath.Base(stamp), filepath.Join(cm, "..data")))
	require.NoError(t, os.Symlink(filepath.Join("..data", "config.yaml"), filepath.Join(cm, "config.yaml")))
	files, err = config.ReadRuntime(filepath.Join(cm, "config"), true)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join("..", "config.yaml")}, names(files))
	files, err = config.ReadRuntime(filepath.Join(cm, "config"), false)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join("..", "config.yaml")}, names(files))
}

// TestWatcherBeside: a Watcher with Beside reloads when a file beside the
// directory changes, and one without does not read it.
func TestWatcherBeside(t *testing.T) {
	sub := t.TempDir()
	dir := filepath.Join(sub, "config")
	require.NoError(t, os.WriteFile(filepath.Join(sub, "config.yaml"), []byte("domain: one\n"), 0o644))
	for _, beside := range []bool{true, false} {
		read := config.ReadDir
		if beside {
			read = config.ReadRuntime
		}
		require.NoError(t, os.WriteFile(filepath.Join(sub, "config.yaml"), []byte("domain: one\n"), 0o644))
		initial, _ := read(dir, false)
		applied := make(chan *config.Config, 10)
		failed := make(chan error, 10)
		w := &config.Watcher{Dir: dir, Beside: beside, Interval: 5 * time.Millisecond,
			Apply: func(c *config.Config) { applied <- c }, Fail: func(err error) { failed <- err }}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); w.Run(ctx, initial) }()
		// Written whole, by a rename: a poll must not read it half written.
		require.NoError(t, os.WriteFile(filepath.Join(sub, "new.tmp"), []byte("domain: two\n"), 0o644))
		require.NoError(t, os.Rename(filepath.Join(sub, "new.tmp"), filepath.Join(sub, "config.yaml")))
		select {
		case c := <-applied:
			require.True(t, beside, "applied without Beside")
			require.True(t, c.HasDomain("two"))
		case err := <-failed:
			require.False(t, beside, "%v", err)
			require.ErrorIs(t, err, fs.ErrNotExist)
		case <-time.After(5 * time.Second):
			t.Fatal("no reload")
		}
		cancel()
		<-done
	}
}
