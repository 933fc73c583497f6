#!/usr/bin/env bash
# Runs BenchmarkOverhead (the wrapper's cost over the bare call, bare and
# wrapped calls alternating in one run) at -cpu 1,2, -count 10, and writes
# results/otel-<date>-<host>-<commit>.txt: a header (internal/cmd/stamp: the
# machine, its caches and clock, Go version, commit, command) and the raw
# output, and the benchstat table beside it (-benchstat.txt), which it also
# prints.
# Run from the repository root: bash admitotel/testdata/overhead.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
out="results/otel-$(date -u +%F)-$(hostname)-$(git rev-parse --short HEAD).txt"
cmd='cd admitotel && go test -run ^$ -bench Overhead -cpu 1,2 -count 10 .'
{
	$GO run ./internal/cmd/stamp -go "$($GO env GOVERSION)" -command "$cmd"
	echo "method: bare and wrapped calls alternate in blocks of 16 within each op and the metrics are medians over the ops, so load slows both alike"
	echo
	(cd admitotel && $GO test -run '^$' -bench Overhead -cpu 1,2 -count 10 .)
} > "$out"
echo "wrote $out"
cd bench && $GO run golang.org/x/perf/cmd/benchstat "../$out" | tee "../${out%.txt}-benchstat.txt"
