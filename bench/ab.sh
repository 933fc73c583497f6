#!/usr/bin/env bash
# A/B: two commits' builds of package bench, alternating. Each round runs
# one sample of every benchmark matching BENCH from each build, the order
# swapped every round, so that a slow phase of a shared machine falls on
# both builds alike (-count N would take one build's samples back to back).
# One go test process per GOMAXPROCS value (see cmd/report). The output,
# headed by the machine's stamp (internal/cmd/stamp), labels each sample
# with a "build: <commit>" line that benchstat reads as configuration:
#
#   bench/ab.sh OLD NEW BENCH CPUS ROUNDS [BENCHTIME] > out.txt
#   cd bench && go run golang.org/x/perf/cmd/benchstat -col build ../out.txt
#   cd bench && go run golang.org/x/perf/cmd/benchstat -filter build:NEW -col /impl ../out.txt
#
# OLD and NEW are commits (NEW may be "." for the working tree); CPUS is a
# comma-separated -cpu list. Run it from the repository root.
set -euo pipefail
[ $# -ge 5 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
old=$1 new=$2 bench=$3 cpus=$4 rounds=$5 benchtime=${6:-100ms}
GO=${GO:-go}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# build REV NAME: the bench test binary of REV into $work/NAME.test.
build() {
	local src
	if [ "$1" = . ]; then
		src=$PWD
	else
		src=$work/src-$2
		mkdir -p "$src"
		git archive "$1" | tar -x -C "$src"
	fi
	(cd "$src/bench" && $GO test -c -o "$work/$2.test" .) >&2
}
name() { if [ "$1" = . ]; then echo "$(git rev-parse --short HEAD)+worktree"; else git rev-parse --short "$1"; fi; }
oldName=$(name "$old") newName=$(name "$new")
build "$old" old
build "$new" new

$GO run ./internal/cmd/stamp -go "$($GO env GOVERSION)" -command "bench/ab.sh $* (old: $oldName, new: $newName)"
echo
for r in $(seq "$rounds"); do
	order="old new"
	if [ $((r % 2)) = 0 ]; then order="new old"; fi
	for b in $order; do
		label=$oldName
		if [ "$b" = new ]; then label=$newName; fi
		echo "build: $label"
		for c in ${cpus//,/ }; do
			"$work/$b.test" -test.run '^$' -test.bench "$bench" -test.cpu "$c" -test.count 1 -test.benchtime "$benchtime" | grep -E '^(Benchmark|goos|goarch|pkg|cpu)'
		done
	done
done
