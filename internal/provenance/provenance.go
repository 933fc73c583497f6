// Package provenance writes the header every committed result starts with
// (bench/'s commands and redisbucket's redisbench share it):
// where, on what, from which commit and by which command it was measured.
// The lines are benchfmt configuration lines ("key: value"), so benchstat
// and benchfmt carry them into their tables.
package provenance

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// Write writes the header. goVersion is the toolchain that ran the
// measurement (report runs go test through another go command); command is
// the exact command line.
func Write(w io.Writer, goVersion, command string) {
	commit, dirty := Commit()
	if dirty {
		commit += " (tracked files modified)"
	}
	host, _ := os.Hostname()
	fmt.Fprintf(w, "machine: %s\n", host)
	fmt.Fprintf(w, "cpu-model: %s\n", cpuModel())
	fmt.Fprintf(w, "cores: %d\n", runtime.NumCPU())
	fmt.Fprintf(w, "go: %s\n", goVersion)
	fmt.Fprintf(w, "commit: %s\n", commit)
	fmt.Fprintf(w, "date: %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "loadavg-at-start: %s\n", LoadAvg())
	fmt.Fprintf(w, "command: %s\n", command)
	fmt.Fprintf(w, "note: this machine has %d cores; GOMAXPROCS above that only adds goroutines, not parallelism\n", runtime.NumCPU())
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

// cpuModel reads the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// FullResult matches the name of a make bench-full raw result,
// <YYYY-MM-DD>-<host>-<commit>.txt; other result files (benchstat tables,
// storm tables, the keyed, rate, middleware and Redis runs) carry a suffix
// or another prefix and do not match.
var FullResult = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}-.+-[0-9a-f]{7,40}\.txt$`)
