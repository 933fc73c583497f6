// Command stamp prints the header every committed result starts with (see
// internal/provenance): the machine, its caches and clock, the Go version,
// the commit, the date, the load and the command. The shell scripts that
// save results call it, so that one piece of code describes every machine:
//
//	go run ./internal/cmd/stamp -go "$(go env GOVERSION)" -command "$cmd"
//	go run ./internal/cmd/stamp -prefix '# ' ...   # for a commented header
//	go run ./internal/cmd/stamp -summary            # one line
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"

	"github.com/admit-go/admit/internal/provenance"
)

func main() {
	goVersion := flag.String("go", runtime.Version(), "the Go version that ran the measurement")
	command := flag.String("command", "", "the exact command that produced the result")
	prefix := flag.String("prefix", "", "a prefix for every line")
	summary := flag.Bool("summary", false, "print the machine in one line instead")
	flag.Parse()
	if *summary {
		fmt.Println(provenance.Describe().Summary())
		return
	}
	provenance.WritePrefixed(os.Stdout, *prefix, *goVersion, *command)
}
