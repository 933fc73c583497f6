package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildOutputIgnored: building a command of this module where a user
// would (go build ./cmd/admit-rls in rls/, or go build in the command's
// directory) leaves a binary that rls/.gitignore ignores, so the repository
// shows no untracked file; the sources stay tracked. The file's patterns
// are read and matched here, so the test runs outside a git checkout too
// (every pattern must be an anchored path, which this matching is exact
// for); inside one, git itself is asked as well.
func TestBuildOutputIgnored(t *testing.T) {
	raw, err := os.ReadFile("../../.gitignore")
	if err != nil {
		t.Fatal(err)
	}
	patterns := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.HasPrefix(line, "/") || strings.ContainsAny(line, "*?[!\\") || strings.HasSuffix(line, "/") {
			t.Fatalf("rls/.gitignore: %q is not an anchored file path; this test only matches those", line)
		}
		patterns[line] = true
	}
	// Paths relative to rls/; git is given them relative to this test's
	// directory, cmd/admit-rls.
	ignored := []string{"/admit-rls", "/rlsbench", "/cmd/admit-rls/admit-rls", "/internal/cmd/rlsbench/rlsbench"}
	tracked := []string{"/cmd/admit-rls/main.go", "/internal/cmd/rlsbench/main.go", "/go.mod"}
	for _, p := range ignored {
		if !patterns[p] {
			t.Errorf("rls%s is not ignored", p)
		}
	}
	for _, p := range tracked {
		if patterns[p] {
			t.Errorf("rls%s is ignored", p)
		}
	}
	if exec.Command("git", "rev-parse", "--show-toplevel").Run() != nil {
		return // not in a git checkout: the patterns above are the whole check
	}
	fromHere := func(p string) string {
		rel, err := filepath.Rel("cmd/admit-rls", p[1:])
		if err != nil {
			t.Fatal(err)
		}
		return rel
	}
	for _, p := range ignored {
		if out, err := exec.Command("git", "check-ignore", "--no-index", fromHere(p)).CombinedOutput(); err != nil {
			t.Errorf("git: %s is not ignored: %v %s", fromHere(p), err, strings.TrimSpace(string(out)))
		}
	}
	for _, p := range tracked {
		if exec.Command("git", "check-ignore", "--no-index", fromHere(p)).Run() == nil {
			t.Errorf("git: %s is ignored", fromHere(p))
		}
	}
}
