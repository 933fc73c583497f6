// Package provenance writes the header every committed result starts with
// (bench/'s commands, redisbucket's redisbench, and through
// internal/cmd/stamp the shell scripts that save results): where, on what
// machine (see Machine), from which commit and by which command it was
// measured.
// The lines are benchfmt configuration lines ("key: value"), so benchstat
// and benchfmt carry them into their tables.
package provenance

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// Write writes the header. goVersion is the toolchain that ran the
// measurement (report runs go test through another go command); command is
// the exact command line.
func Write(w io.Writer, goVersion, command string) {
	WritePrefixed(w, "", goVersion, command)
}

// WritePrefixed writes the header with prefix before every line ("# " for
// a file whose other lines are not benchmark results).
func WritePrefixed(w io.Writer, prefix, goVersion, command string) {
	commit, dirty := Commit()
	if dirty {
		commit += " (tracked files modified)"
	}
	m := Describe()
	for _, kv := range m.Lines() {
		fmt.Fprintf(w, "%s%s: %s\n", prefix, kv[0], kv[1])
	}
	fmt.Fprintf(w, "%sgo: %s\n", prefix, goVersion)
	fmt.Fprintf(w, "%scommit: %s\n", prefix, commit)
	fmt.Fprintf(w, "%sdate: %s\n", prefix, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "%sloadavg-at-start: %s\n", prefix, LoadAvg())
	fmt.Fprintf(w, "%scommand: %s\n", prefix, command)
	fmt.Fprintf(w, "%snote: this machine has %d vCPUs; GOMAXPROCS above that only adds goroutines, not parallelism\n", prefix, m.VCPUs)
}

// Commit returns the short commit of the checkout and whether tracked files
// outside results/ differ from it. Without git it returns "nocommit".
func Commit() (string, bool) {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "nocommit", false
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return strings.TrimSpace(string(out)), false
	}
	status, _ := exec.Command("git", "-C", strings.TrimSpace(string(top)), "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results").Output()
	return strings.TrimSpace(string(out)), len(bytes.TrimSpace(status)) > 0
}

// LoadAvg is /proc/loadavg's 1, 5 and 15 minute figures: a busy machine
// makes every number in the run suspect, and the header should say so.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// FullResult matches the name of a make bench-full raw result,
// <YYYY-MM-DD>-<host>-<commit>.txt; other result files (benchstat tables,
// storm tables, the keyed, rate, middleware and Redis runs) carry a suffix
// or another prefix and do not match.
var FullResult = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}-.+-[0-9a-f]{7,40}\.txt$`)
