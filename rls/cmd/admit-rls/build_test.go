package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBuildOutputIgnored: building a command of this module where a user
// would (go build ./cmd/admit-rls in rls/, or go build in the command's
// directory) leaves a binary that git ignores, so the repository shows no
// untracked file; the sources stay tracked.
func TestBuildOutputIgnored(t *testing.T) {
	if err := exec.Command("git", "rev-parse", "--show-toplevel").Run(); err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	for _, path := range []string{"../../admit-rls", "../../rlsbench", "admit-rls", "../../internal/cmd/rlsbench/rlsbench"} {
		if out, err := exec.Command("git", "check-ignore", "--no-index", path).CombinedOutput(); err != nil {
			t.Errorf("%s is not ignored: %v %s", path, err, strings.TrimSpace(string(out)))
		}
	}
	for _, path := range []string{"main.go", "../../internal/cmd/rlsbench/main.go", "../../go.mod"} {
		if exec.Command("git", "check-ignore", "--no-index", path).Run() == nil {
			t.Errorf("%s is ignored", path)
		}
	}
}
