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
