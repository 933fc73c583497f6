package provenance

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// RedisResult matches the name of a redisbench run,
// redis-<YYYY-MM-DD>-<host>-<commit>.txt; its benchstat table and the
// paired, decision, limits and other runs carry another suffix or prefix.
var RedisResult = regexp.MustCompile(`^redis-\d{4}-\d{2}-\d{2}-.+-[0-9a-f]{7,40}\.txt$`)

var dateInName = regexp.MustCompile(`\d{4}-\d{2}-\d{2}`)

// Newest returns the file in dir whose name re matches and carries the
// latest date (its first YYYY-MM-DD), the latest modified among those of
// that date, then the greatest name. The modification time alone is no
// guide: a fresh clone gives every file the checkout's time, and editing
// an old result makes it the newest. The error, when no name matches,
// names dir.
func Newest(dir string, re *regexp.Regexp) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	type file struct {
		name, date string
		mtime      int64
	}
	var files []file
	for _, e := range entries {
		if n := e.Name(); e.Type().IsRegular() && re.MatchString(n) {
			f := file{name: n, date: dateInName.FindString(n)}
			if fi, err := e.Info(); err == nil {
				f.mtime = fi.ModTime().UnixNano()
			}
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no result named as %s in %s", re, dir)
	}
	newest := slices.MaxFunc(files, func(a, b file) int {
		return cmp.Or(strings.Compare(a.date, b.date), cmp.Compare(a.mtime, b.mtime), strings.Compare(a.name, b.name))
	})
	return filepath.Join(dir, newest.name), nil
}
