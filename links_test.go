package admit_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink matches an inline Markdown link or image target: ](target) or
// ](target "title").
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestDocLinks fails when a Markdown file of the repository (README, docs/,
// any package's) links to a file that does not exist, or to a heading that a
// linked Markdown file does not have. Links out of the repository are not
// followed; links that climb out of it are errors, since a clone holds
// nothing outside it.
func TestDocLinks(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("found only %d Markdown files under %s", len(files), root)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, m := range mdLink.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
			}
			if r, err := filepath.Rel(root, dest); err != nil || strings.HasPrefix(r, "..") {
				t.Errorf("%s: link %q leaves the repository", rel, target)
				continue
			}
			info, err := os.Stat(dest)
			if err != nil {
				t.Errorf("%s: link %q: no such file", rel, target)
				continue
			}
			if anchor != "" && !info.IsDir() && strings.HasSuffix(dest, ".md") {
				if !hasAnchor(t, dest, anchor) {
					t.Errorf("%s: link %q: %s has no heading #%s", rel, target, filepath.Base(dest), anchor)
				}
			}
		}
	}
}

// stripCode removes fenced code blocks, whose brackets are not links.
func stripCode(s string) string {
	var out strings.Builder
	in := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if !in {
			out.WriteString(line)
			out.WriteByte('\n')
		}
	}
	return out.String()
}

// hasAnchor reports whether the Markdown file has a heading whose
// GitHub-style slug is anchor.
func hasAnchor(t *testing.T, path, anchor string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(stripCode(string(b)), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		if slug(strings.TrimLeft(line, "# ")) == anchor {
			return true
		}
	}
	return false
}

// slug is GitHub's heading anchor: lower case, spaces to hyphens, and
// everything but letters, digits, hyphens and underscores dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 0x7f && (r >= 'à' && r <= 'ÿ'):
			b.WriteRune(r)
		}
	}
	return b.String()
}
