package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAppDirectorySiblings: under envoyproxy/ratelimit's default
// RUNTIME_WATCH_ROOT=true its runtime loader reads every file under
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY and keeps those whose path there, with
// "/" read as ".", starts with RUNTIME_APPDIRECTORY + ".": the files of the
// config directory, and also a config.yaml beside it (a Helm chart that
// mounts one file with subPath at $RUNTIME_ROOT/ratelimit/config.yaml
// relies on it). Such a file's rules must apply here too; with
// RUNTIME_WATCH_ROOT=false envoyproxy/ratelimit reads the config directory
// only.
func TestAppDirectorySiblings(t *testing.T) {
	const beside = `
domain: beside
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	files := map[string]string{
		"a.yaml":             "domain: a\n",
		"../config.yaml":     beside,
		"../config.d/x.yaml": "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"../other.yaml":      "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
	}
	p := startRLS(t, nil, files)
	require.Equal(t, ok, p.ask(t, "beside", d("k", "v")).OverallCode)
	require.Equal(t, over, p.ask(t, "beside", d("k", "v")).OverallCode, "config.yaml beside the config directory was not loaded")
	require.Equal(t, ok, p.ask(t, "x", d("k", "v")).OverallCode)
	require.Equal(t, over, p.ask(t, "x", d("k", "v")).OverallCode, "config.d/x.yaml was not loaded")
	require.Equal(t, ok, p.ask(t, "other", d("k", "v")).OverallCode)
	require.Equal(t, ok, p.ask(t, "other", d("k", "v")).OverallCode, "other.yaml was loaded")

	q := startRLS(t, []string{"RUNTIME_WATCH_ROOT=false"}, files)
	require.Equal(t, ok, q.ask(t, "beside", d("k", "v")).OverallCode)
	require.Equal(t, ok, q.ask(t, "beside", d("k", "v")).OverallCode, "RUNTIME_WATCH_ROOT=false read beside the config directory")
}
